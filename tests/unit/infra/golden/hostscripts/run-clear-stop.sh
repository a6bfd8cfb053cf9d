rm -f /data/.dss/run1/stop
