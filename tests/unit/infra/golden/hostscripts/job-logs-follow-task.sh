tail -n 20 -F /var/lib/dss-lab/shared/logs/exp1/launcher.log | grep --line-buffered -F -- '10.0.1.3: '
