#!/usr/bin/env bash
# Makes a cluster CA and node certificates for gridtrain's TLS (cluster.tls_certificate, tls_key, tls_ca).
#
#   scripts/make-certs.sh DIR NAME...
#
# DIR/ca.pem and DIR/ca.key: the cluster CA, made once (an existing one is reused, so nodes can be added later).
# DIR/NAME.pem and DIR/NAME.key: a certificate for each NAME, signed by the CA, good as TLS client and server.
# Keys are EC P-256, unencrypted (a node starts unattended), readable by their owner only.
#
# Every holder of a certificate from this CA is a member of the cluster: keep ca.key off the nodes, and use the CA
# for nothing else. For a real cluster, an organisation's own CA or a secrets manager may issue these instead.
set -euo pipefail

if [ $# -lt 2 ]; then
  echo "usage: $0 DIR NAME..." >&2
  exit 2
fi
dir=$1
shift
command -v openssl >/dev/null || { echo "error: openssl not found (Debian package openssl)" >&2; exit 2; }
mkdir -p "$dir"
umask 077

if [ ! -f "$dir/ca.pem" ] || [ ! -f "$dir/ca.key" ]; then
  openssl req -x509 -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -sha256 -days 3650 \
    -subj "/CN=gridtrain cluster CA" -keyout "$dir/ca.key" -out "$dir/ca.pem" 2>/dev/null
  echo "made the CA: $dir/ca.pem"
fi

for name in "$@"; do
  case "$name" in
    ''|*/*|ca) echo "error: bad certificate name '$name' (no '/', not 'ca')" >&2; exit 2 ;;
  esac
  ext=$(mktemp)
  printf 'basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth,clientAuth\nsubjectAltName=DNS:%s\n' \
    "$name" >"$ext"
  openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -sha256 -subj "/CN=$name" \
    -keyout "$dir/$name.key" -out "$dir/$name.csr" 2>/dev/null
  openssl x509 -req -in "$dir/$name.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" -CAcreateserial -days 825 -sha256 \
    -extfile "$ext" -out "$dir/$name.pem" 2>/dev/null
  rm -f "$ext" "$dir/$name.csr"
  echo "made $dir/$name.pem and $dir/$name.key"
done
