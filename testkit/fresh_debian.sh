#!/bin/sh
# make test on a fresh Debian (`make test-fresh-debian`): a clean clone of HEAD in a container of
# the image $1 (a bare Debian), the prerequisites the README names (git, make, python3) installed
# first, then `make test`, whose Makefile installs everything else; the container trusts the extra
# certificate authorities in the folder $2 (`make image-ca`: the host's). The container and the
# clone are removed at the end; the log stays in $3.
set -eu
base=$1
ca_dir=$(cd "$2" && pwd)
root=$(cd "$(dirname "$0")/.." && pwd)
log=$root/$3
work=$(mktemp -d /tmp/fetchlat-fresh-XXXXXX)
name=fetchlat-fresh-$(basename "$work" | cut -d- -f3)
git clone -q "$root" "$work/src"
mkdir -p "$root/build"
cat > "$work/run.sh" <<'INNER'
set -e
t0=$(date +%s)
apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq ca-certificates git make python3 >/dev/null
if ls /hostca/*.crt >/dev/null 2>&1; then cp /hostca/*.crt /usr/local/share/ca-certificates/ && update-ca-certificates >/dev/null 2>&1; fi
command -v cargo >/dev/null && echo "cargo before make: $(cargo --version)" || echo "no cargo, no rustup before make"
cd /src
t1=$(date +%s)
set +e
make test
rc=$?
echo "fresh Debian $(cat /etc/debian_version): prerequisites $((t1 - t0)) s; make test exit $rc in $(( $(date +%s) - t1 )) s"
exit $rc
INNER
ca=/etc/ssl/certs/ca-certificates.crt
set +e
docker run --name "$name" --shm-size 2g -v "$work/src:/src" -v "$ca_dir:/hostca:ro" -v "$work/run.sh:/run.sh:ro" \
  -e SSL_CERT_FILE=$ca -e PIP_CERT=$ca -e NODE_EXTRA_CA_CERTS=$ca -e REQUESTS_CA_BUNDLE=$ca \
  "$base" sh /run.sh > "$log" 2>&1
rc=$?
docker rm -f "$name" >/dev/null 2>&1
rm -rf "$work"
grep -E "^hot path:|^fresh Debian|passed|failed" "$log" | tail -8
exit $rc
