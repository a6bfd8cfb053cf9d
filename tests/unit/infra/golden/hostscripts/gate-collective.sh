printf %s '10.0.1.2 slots=1
10.0.1.3 slots=1
' > /tmp/dss-gate-hostfile && cd /opt/dss && exec timeout -s KILL 90 /opt/venv/bin/python -m dss_train.collective --hostfile /tmp/dss-gate-hostfile --me 10.0.1.2 --port 29600 --iters 5 --sizes 1048576 16777216 2>&1