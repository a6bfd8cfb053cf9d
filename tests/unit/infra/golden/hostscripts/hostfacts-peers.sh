for a in 10.0.1.2 10.0.1.3; do
  (
    s=$(date +%s%N)
    set -- $(timeout 2 getent hosts "$a" 2>/dev/null | head -n1)
    ip=${1:-} n=${2:-}
    if [ -n "$ip" ] && [ "$ip" != "$a" ]; then
      set -- $(timeout 2 getent hosts "$ip" 2>/dev/null | head -n1)
      n=${2:-}
    fi
    e=$(date +%s%N)
    echo "peer_lookup=$a $(( (e - s) / 1000000 )) ${n:-?}"
  ) &
done
wait
