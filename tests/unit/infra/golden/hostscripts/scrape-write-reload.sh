set -eu
ctr=""
for i in $(seq 1 120); do
  ctr=$(docker ps -q --filter "label=com.docker.swarm.service.name=job1-master" | head -n1)
  [ -n "$ctr" ] && break
  sleep 1
done
if [ -z "$ctr" ]; then
  echo "scrape: no task of job1-master on $(hostname) after 120s" >&2
  exit 1
fi
printf %s 'scrape_configs: []
' | docker exec -i -u 1000 "$ctr" sh -c 'mkdir -p $(dirname /data/monitoring/jobs/job1.yml) && cat > /data/monitoring/jobs/job1.yml.new && mv /data/monitoring/jobs/job1.yml.new /data/monitoring/jobs/job1.yml'
echo "scrape: /data/monitoring/jobs/job1.yml written"
prom=$(docker ps -q --filter "label=com.docker.swarm.service.name=ds-prometheus" | head -n1)
if [ -n "$prom" ]; then
  docker kill --signal HUP "$prom" >/dev/null && echo "scrape: Prometheus reloads its jobs"
else
  echo "scrape: no Prometheus task on $(hostname); it reads the file when it starts"
fi
