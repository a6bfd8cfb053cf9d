mkdir -p $(dirname /data/a/b) && cat > /data/a/b.new.$(hostname).$$ && chmod 755 /data/a/b.new.$(hostname).$$ && mv /data/a/b.new.$(hostname).$$ /data/a/b
