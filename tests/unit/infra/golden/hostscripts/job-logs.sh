tail -n 50 /var/lib/dss-lab/shared/logs/exp1/launcher.log
