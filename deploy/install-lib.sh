# shellcheck shell=bash
# What deploy/install.sh and deploy/upgrade.sh share (sourced, not run): the settings with their
# defaults, copying a release into the prefix, the venv, manage.py, the units and the services.

prefix=${KLIQUE_PREFIX:-/opt/klique}
source_dir=${KLIQUE_SOURCE:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
env_file=${KLIQUE_ENV_FILE:-/etc/klique/klique.env}
state_dir=${KLIQUE_STATE_DIR:-/var/lib/klique}
systemd_dir=${KLIQUE_SYSTEMD_DIR:-/etc/systemd/system}
user=${KLIQUE_USER:-klique}
python=${PYTHON:-python3}
pip_args=${KLIQUE_PIP_ARGS:-}
no_systemd=${KLIQUE_INSTALL_NO_SYSTEMD:-}
units=(klique-web klique-celery klique-whatif klique-beat)
started=$(date +%s)

say() { printf '[%3ds] %s\n' $(($(date +%s) - started)) "$*"; }
die() { echo "$(basename "$0"): $*" >&2; exit 1; }

# Long options shared by both scripts; sets the variable and says how many words it took (0: not ours).
common_option() {
  case "$1" in
    --prefix) prefix=$2 ;;
    --source) source_dir=$2 ;;
    --env-file) env_file=$2 ;;
    --state-dir) state_dir=$2 ;;
    --systemd-dir) systemd_dir=$2 ;;
    --user) user=$2 ;;
    --python) python=$2 ;;
    --pip-args) pip_args=$2 ;;
    --no-systemd) no_systemd=1; return 1 ;;
    *) return 0 ;;
  esac
  [ -n "${2:-}" ] || die "$1 needs a value"
  return 2
}

check_common() {
  prefix=$(realpath -m "$prefix")
  source_dir=$(realpath -m "$source_dir")
  { [ -f "$source_dir/pyproject.toml" ] && [ -f "$source_dir/manage.py" ]; } || die "$source_dir is not a Klique release (--source)"
  if [ "$(id -u)" != 0 ] && [ "$user" != "$(id -un)" ]; then
    die "run as root, or with --user $(id -un) (the services then run as you)"
  fi
  if [ -z "$no_systemd" ] && [ ! -d /run/systemd/system ]; then
    die "systemd is not running here (PID 1 is $(ps -o comm= -p 1)); give --no-systemd (units are installed, not enabled)"
  fi
  group=$(id -gn "$user" 2>/dev/null || echo "$user")
}

# The release's files, NUL-separated and relative: git's tracked and untracked-but-not-ignored files
# of a checkout, else every file but the venv, the collected static files and caches.
release_files() {
  if git -C "$source_dir" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    git -C "$source_dir" ls-files -z --cached --others --exclude-standard | while IFS= read -r -d '' f; do
      [ -e "$source_dir/$f" ] && printf '%s\0' "$f"
    done
  else
    (cd "$source_dir" && find . -type f ! -path './.venv/*' ! -path './staticfiles/*' ! -path './.git/*' \
      ! -name '*.pyc' ! -name '.klique-files' -printf '%P\0')
  fi
}

# Copy the release into the prefix (nothing to do when they are one folder); files of the previous
# release that this one no longer has are removed (the list of copied files: PREFIX/.klique-files).
copy_release() {
  [ "$source_dir" = "$prefix" ] && { say "release in place: $prefix"; return; }
  mkdir -p "$prefix"
  local list
  list=$(mktemp)
  release_files | sort -z >"$list"
  if [ -f "$prefix/.klique-files" ]; then
    comm -z -23 "$prefix/.klique-files" "$list" | (cd "$prefix" && xargs -0 -r rm -f --)
  fi
  tar -C "$source_dir" --null -T "$list" -cf - | tar -C "$prefix" -xf -
  mv "$list" "$prefix/.klique-files"
  chmod 644 "$prefix/.klique-files"
  say "release copied from $source_dir to $prefix ($(tr -cd '\0' <"$prefix/.klique-files" | wc -c) files)"
}

# A fresh venv with the release and its server extra (upgrade: the old one is removed first).
build_venv() {
  rm -rf "$prefix/.venv"
  "$python" -m venv "$prefix/.venv"
  # shellcheck disable=SC2086  # KLIQUE_PIP_ARGS is words, e.g. --no-index --find-links /srv/wheels
  "$prefix/.venv/bin/pip" install --quiet --disable-pip-version-check $pip_args -e "${prefix}[server]"
  say "venv $prefix/.venv: klique $(version)"
}

# From the prefix, as the units run: a klique.egg-info in the current folder would shadow the venv's.
version() { (cd "$prefix" && .venv/bin/python -c "from klique.version import VERSION; print(VERSION)"); }

manage() { KLIQUE_ENV_FILE=$env_file KLIQUE_USER=$user "$prefix/deploy/manage.sh" "$@"; }

# Settings of the environment file (as systemd reads it), e.g. setting WEB_BIND.
setting() { python3 "$prefix/deploy/with_env.py" --print "$env_file" | sed -n "s/^$1=//p" | tail -1; }

# Static files (as root: the prefix is read-only to the services) and byte code for the read-only /opt.
collect_static() {
  KLIQUE_USER=root manage collectstatic --no-input -v 0
  "$prefix/.venv/bin/python" -m compileall -q "$prefix/klique" "$prefix/apps"
  say "static files collected in $(setting STATIC_ROOT), byte code compiled"
}

# The units of deploy/systemd, with this install's prefix, environment file, state folder and user.
install_units() {
  mkdir -p "$systemd_dir"
  for unit in "${units[@]}"; do
    sed -e "s#/etc/klique/klique.env#$env_file#g" -e "s#/opt/klique#$prefix#g" -e "s#/var/lib/klique#$state_dir#g" \
      -e "s#^User=klique\$#User=$user#" -e "s#^Group=klique\$#Group=$group#" \
      "$prefix/deploy/systemd/$unit.service" >"$systemd_dir/$unit.service"
  done
  say "units installed in $systemd_dir: ${units[*]}"
}

unit_files() { for unit in "$@"; do printf '%s\n' "$systemd_dir/$unit.service"; done; }

# services start|stop|restart UNIT...: through systemd, or with --no-systemd as plain processes
# (deploy/unitrun.py: pid and log files in STATE_DIR/run).
services() {
  local action=$1
  shift
  if [ -z "$no_systemd" ]; then
    systemctl "$action" "$@"
    return
  fi
  local files
  mapfile -t files < <(unit_files "$@")
  case "$action" in
    restart) "$python" "$prefix/deploy/unitrun.py" stop --run-dir "$state_dir/run" "${files[@]}"
             "$python" "$prefix/deploy/unitrun.py" start --run-dir "$state_dir/run" "${files[@]}" ;;
    *) "$python" "$prefix/deploy/unitrun.py" "$action" --run-dir "$state_dir/run" "${files[@]}" ;;
  esac
}

web_url() { local bind; bind=$(setting WEB_BIND); echo "http://${bind:-127.0.0.1:8000}"; }

# wait_ready SECONDS PATH: the web answers 200 at PATH (probes answer before the host check).
wait_ready() {
  local url
  url=$(web_url)$2
  for _ in $(seq 1 $(($1 * 2))); do
    curl -fsS -o /dev/null "$url" 2>/dev/null && { say "$url answers 200"; return 0; }
    sleep 0.5
  done
  curl -sS "$url" >&2 || true
  die "$url did not answer 200 within $1 s"
}
