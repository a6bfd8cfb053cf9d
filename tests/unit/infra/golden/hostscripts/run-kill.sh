pkill -KILL -f "$SUP" || true; pkill -KILL -f "$PAT" || true
