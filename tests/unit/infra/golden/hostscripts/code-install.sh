set -eu
umask 022
mkdir -p /data/code/run1
part=/data/code/run1/.partial-abc123-$$
trap 'rm -rf "$part" /tmp/code-abc123.tar' EXIT
intact() { (cd "$1" && sha256sum -c --quiet --strict .dss-code.sha256) >/dev/null 2>&1; }
if [ -f /data/code/run1/abc123/.dss-code.sha256 ] && intact /data/code/run1/abc123; then
  echo "code abc123: already in place"
else
  mkdir -p "$part"
  tar -x -f /tmp/code-abc123.tar -C "$part" --no-same-owner
  (cd "$part/abc123" && sha256sum -c --quiet --strict .dss-code.sha256)
  rm -rf /data/code/run1/abc123
  mv "$part/abc123" /data/code/run1/abc123
  echo "code abc123: installed"
fi
for d in /data/code/run1/*; do
  [ -d "$d" ] || continue
  case " abc123 def456 " in *" ${d##*/} "*) ;; *) rm -rf "$d" ;; esac
done
