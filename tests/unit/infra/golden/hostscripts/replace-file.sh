mkdir -p $(dirname /data/a/b.txt) && cat > /data/a/b.txt.new && mv /data/a/b.txt.new /data/a/b.txt
