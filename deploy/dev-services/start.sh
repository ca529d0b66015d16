#!/usr/bin/env bash
# The real services the test suite and the benchmarks need, on a fresh Debian machine: installs
# them from Debian's packages where missing, and starts them on loopback.
#
#   deploy/dev-services/start.sh [postgresql] [redis] [mariadb] [keycloak]   (default: postgresql and redis)
#
# - PostgreSQL (Debian's `postgresql`): the first cluster, trust for 127.0.0.1 and ::1 so that the
#   tests connect as `postgres` without a password (a test machine only: never in production).
# - Redis (`redis-server`): 127.0.0.1:6379, no persistence, 256 databases (one per test worker).
# - MariaDB (`mariadb-server`): 127.0.0.1:3306, root without a password, for slurmdbd (deploy/slurm-dev).
# - Keycloak 26.5.6 (the pinned distribution from Maven Central, not Debian's; needs a JDK 21+):
#   http://127.0.0.1:8180/realms/klique, by keycloak/start.sh (no root needed).
#
# Needs root (apt-get, the clusters' own users). Idempotent: a service already answering is left.
set -euo pipefail

wanted=("$@")
[ ${#wanted[@]} -gt 0 ] || wanted=(postgresql redis)

apt_install() {
  local missing=()
  for package in "$@"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "dev-services: installing ${missing[*]} from Debian's packages" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null \
    || { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; }
}

wait_for() {  # what, command...
  local what=$1
  shift
  for _ in $(seq 1 60); do
    "$@" >/dev/null 2>&1 && return 0
    sleep 0.5
  done
  echo "dev-services: $what did not answer within 30 s" >&2
  return 1
}

start_postgresql() {
  apt_install postgresql
  local version hba
  version=$(find /etc/postgresql -mindepth 1 -maxdepth 1 -printf '%f\n' | sort -V | tail -1)
  hba=/etc/postgresql/$version/main/pg_hba.conf
  if ! grep -q "^# klique-dev: trust on loopback" "$hba"; then
    # The first matching line wins: trust for loopback TCP goes first.
    { printf '# klique-dev: trust on loopback (a test machine only)\n'
      printf 'host all all 127.0.0.1/32 trust\nhost all all ::1/128 trust\n'
      printf 'host replication all 127.0.0.1/32 trust\n'
      cat "$hba"; } >"$hba.new"
    mv "$hba.new" "$hba"
    chown postgres:postgres "$hba"
    if pg_isready -h 127.0.0.1 -p 5432 -q; then
      pg_ctlcluster --skip-systemctl-redirect "$version" main reload
    fi
  fi
  if ! pg_isready -h 127.0.0.1 -p 5432 -q; then
    pg_ctlcluster --skip-systemctl-redirect "$version" main start
  fi
  wait_for "PostgreSQL on 127.0.0.1:5432" pg_isready -h 127.0.0.1 -p 5432 -q
  wait_for "PostgreSQL trust for 127.0.0.1" psql -h 127.0.0.1 -U postgres -w -qAt -c "select 1"
  echo "postgresql: postgres://postgres@127.0.0.1:5432/"
}

start_redis() {
  apt_install redis-server
  # 256 databases: each pytest-xdist worker takes REDIS_URL's number + 16 * N (klique/settings/test.py).
  # A Redis already running with fewer (Debian's package may start one) is restarted as ours.
  local databases
  # (No Redis running yet: redis-cli fails, and under pipefail so would the assignment.)
  databases=$(redis-cli -h 127.0.0.1 -p 6379 config get databases 2>/dev/null | tail -1) || databases=""
  if [ -n "$databases" ] && [ "$databases" -lt 256 ]; then
    echo "dev-services: restarting the Redis on 127.0.0.1:6379 with 256 databases (it had $databases)" >&2
    redis-cli -h 127.0.0.1 -p 6379 shutdown nosave >/dev/null 2>&1 || true
    for _ in $(seq 1 20); do redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1 || break; sleep 0.5; done
  fi
  if ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
    redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no \
      --databases 256 --logfile /tmp/klique-dev-redis.log
  fi
  wait_for "Redis on 127.0.0.1:6379" redis-cli -h 127.0.0.1 -p 6379 ping
  echo "redis: redis://127.0.0.1:6379/"
}

start_mariadb() {
  apt_install mariadb-server
  if ! mysqladmin -h 127.0.0.1 -u root ping >/dev/null 2>&1; then
    install -d -o mysql -g mysql -m 755 /run/mysqld
    if ! mysqladmin --protocol=socket -u root ping >/dev/null 2>&1; then
      # Detached, with no descriptor of ours open: a caller reading our output is not held.
      (cd / && setsid mysqld_safe --bind-address=127.0.0.1 --port=3306 \
        </dev/null >/tmp/klique-dev-mariadb.log 2>&1 &)
      wait_for "MariaDB's socket" mysqladmin --protocol=socket -u root ping
    fi
    # Debian's root logs in through the Unix socket only; slurmdbd connects over TCP without a password.
    mysql --protocol=socket -u root -e \
      "ALTER USER 'root'@'localhost' IDENTIFIED VIA unix_socket OR mysql_native_password USING PASSWORD('');
       CREATE USER IF NOT EXISTS 'root'@'127.0.0.1' IDENTIFIED BY '';
       GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION; FLUSH PRIVILEGES;"
  fi
  wait_for "MariaDB on 127.0.0.1:3306" mysqladmin -h 127.0.0.1 -u root ping
  echo "mariadb: root@127.0.0.1:3306"
}

for service in "${wanted[@]}"; do
  case "$service" in
    postgresql) start_postgresql ;;
    redis) start_redis ;;
    mariadb) start_mariadb ;;
    keycloak) "$(dirname "$0")/keycloak/start.sh" ;;
    *) echo "dev-services: unknown service '$service' (postgresql, redis, mariadb, keycloak)" >&2; exit 2 ;;
  esac
done
