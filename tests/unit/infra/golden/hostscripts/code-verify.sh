if [ ! -f /data/code/run1/abc123/.dss-code.sha256 ]; then echo "missing: /data/code/run1/abc123"; exit 3; fi
out=$(cd /data/code/run1/abc123 && sha256sum -c --quiet --strict .dss-code.sha256 2>&1) || {
  echo "$out" | head -5; exit 4; }
