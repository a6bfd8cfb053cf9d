while pgrep -x sshd >/dev/null; do
  if [ -f "/data/.dss/${DSS_RUN}/takeover.py" ] && [ -f "/data/.dss/${DSS_RUN}/follow.json" ] && [ -d "/data/logs/${DSS_RUN}" ]; then
    python3 "/data/.dss/${DSS_RUN}/takeover.py" takeover "/data/.dss/${DSS_RUN}/follow.json" >>"/data/logs/${DSS_RUN}/launcher.log" 2>&1
  fi
  sleep 5
done
exit 1
