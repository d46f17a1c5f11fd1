#!/usr/bin/env bash
# Throwaway certificates for docker-compose.tls.yml (the same recipe as zkrecipes.testing's TLS ensembles):
# a CA, one server certificate for localhost/127.0.0.1 in a PKCS12 key store, a PKCS12 trust store holding
# the CA (made by the JDK's keytool: Java trusts no CA in a store made by openssl alone), and a client
# certificate and key in PEM for kazoo and the zkrecipes CLI. Valid for 30 days; for tests, not production.
#
#   bash docker/make-tls-certs.sh [DIR]      (default: docker/tls)
set -euo pipefail
dir="${1:-$(dirname "$0")/tls}"
pass=changeit  # the store password docker-compose.tls.yml gives the servers
mkdir -p "$dir" && cd "$dir"
ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
openssl req -x509 "${ec[@]}" -keyout ca.key -out ca.pem -days 30 -subj "/CN=zkrecipes docker test CA" 2>/dev/null
for name in server client; do
  openssl req -new "${ec[@]}" -keyout "$name.key" -out "$name.csr" -subj "/CN=zkrecipes-$name" 2>/dev/null
  printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n' > "$name.ext"
  openssl x509 -req -in "$name.csr" -CA ca.pem -CAkey ca.key -CAcreateserial -days 30 -extfile "$name.ext" \
    -out "$name.pem" 2>/dev/null
done
openssl pkcs12 -export -in server.pem -inkey server.key -certfile ca.pem -name server -out server.p12 -passout "pass:$pass"
rm -f trust.p12
keytool -importcert -noprompt -alias ca -file ca.pem -keystore trust.p12 -storetype PKCS12 -storepass "$pass" \
  >/dev/null 2>&1
chmod 644 server.p12 trust.p12  # the image runs ZooKeeper as its own user
echo "wrote $(pwd): ca.pem client.pem client.key (for clients), server.p12 trust.p12 (for the servers)"
