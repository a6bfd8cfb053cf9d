pgrep -f "$PAT" >/dev/null
