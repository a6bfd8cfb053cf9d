tail -n1 /var/lib/dss-lab/shared/logs/exp1/metrics.jsonl 2>/dev/null
