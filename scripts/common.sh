# Shared by the demo, test and bench commands: prerequisites and throwaway clusters.
# Source it; it sets -euo pipefail.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PG_CONFIG="${PG_CONFIG:-/usr/bin/pg_config}"
# pgrx's feature for that PostgreSQL (pg15, pg18).
PG_FEATURE="pg$("$PG_CONFIG" --version 2>/dev/null | sed -E 's/^PostgreSQL ([0-9]+).*/\1/')"
PGRX_VERSION="0.18.1"
APT_PACKAGES=(postgresql-15 postgresql-server-dev-15 clang libclang-dev pkg-config libssl-dev sudo python3 python3-venv)
export PATH="$HOME/.cargo/bin:$PATH"

say() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }

# Runs a command as root: directly when we are root, else through sudo.
as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

# Runs a command as the owner of the throwaway clusters: `postgres` when we are root
# (initdb refuses to run as root), else ourselves.
as_owner() {
    if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

pg_bindir() { "$PG_CONFIG" --bindir; }

ensure_prerequisites() {
    local missing=()
    for package in "${APT_PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" \
            || missing+=("$package")
    done
    if [ "${#missing[@]}" -gt 0 ]; then
        say "installing ${missing[*]}"
        as_root apt-get update -qq
        as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
    fi
    if ! command -v cargo >/dev/null; then
        echo "cargo is missing: install Rust (https://rustup.rs) first" >&2
        exit 1
    fi
    if ! cargo pgrx --version 2>/dev/null | grep -q "$PGRX_VERSION"; then
        say "installing cargo-pgrx $PGRX_VERSION (about 9 minutes, once)"
        cargo install cargo-pgrx --version "=$PGRX_VERSION" --locked
    fi
    if ! grep -qs "^pg15 = \"$PG_CONFIG\"" "${PGRX_HOME:-$HOME/.pgrx}/config.toml"; then
        say "registering PostgreSQL 15 with pgrx"
        cargo pgrx init --pg15 "$PG_CONFIG" >/dev/null
    fi
}

# PostgreSQL 18, built once from ../shared/vendor into a cache outside the clone (about 13
# minutes on 2 cores; later runs find it), and registered with pgrx. Prints its pg_config.
PG18_VERSION="18.6"
PG18_TARBALL="$REPO/../shared/vendor/postgresql-$PG18_VERSION.tar.bz2"
# Outside the clone, and readable by the clusters' owner (root's home is not).
if [ "$(id -u)" -eq 0 ]; then
    PG_EXP_MECH_CACHE="${PG_EXP_MECH_CACHE:-/var/cache/pg_exp_mech}"
else
    PG_EXP_MECH_CACHE="${PG_EXP_MECH_CACHE:-$HOME/.cache/pg_exp_mech}"
fi
PG18_PREFIX="$PG_EXP_MECH_CACHE/postgresql-$PG18_VERSION"
ensure_pg18() {
    local pg_config="$PG18_PREFIX/bin/pg_config"
    # As Debian builds its own (ICU collations, which tests use), without the extras.
    local configure=(--prefix="$PG18_PREFIX" --with-icu)
    local contrib=(auto_explain pg_stat_statements)   # what tests/ loads
    local built="${configure[*]} contrib: ${contrib[*]}"
    if [ "$(cat "$PG18_PREFIX/.configured" 2>/dev/null)" != "$built" ] \
        || ! "$pg_config" --version 2>/dev/null | grep -qx "PostgreSQL $PG18_VERSION"; then
        local packages=(bison flex zlib1g-dev libreadline-dev libicu-dev) missing=() package
        for package in "${packages[@]}"; do
            dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" \
                || missing+=("$package")
        done
        if [ "${#missing[@]}" -gt 0 ]; then
            say "installing ${missing[*]} (to build PostgreSQL $PG18_VERSION)"
            as_root apt-get update -qq
            as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
        fi
        say "building PostgreSQL $PG18_VERSION into $PG18_PREFIX (about 13 minutes, once)"
        # Installed into a staging directory, then moved into place: cargo pgrx refuses
        # to run (for 15 too) while a registered pg_config is missing.
        local build="$PG_EXP_MECH_CACHE/build-$PG18_VERSION"
        rm -rf "$build"
        mkdir -p "$build"
        tar xjf "$PG18_TARBALL" -C "$build"
        # Run from `make test`, make's MAKELEVEL (1) would reach PostgreSQL's build,
        # which then takes itself for a sub-make and skips generating its headers
        # (utils/errcodes.h: no such file) on a machine without the cache.
        (unset MAKELEVEL MAKEFLAGS MFLAGS; cd "$build/postgresql-$PG18_VERSION" \
            && ./configure "${configure[@]}" >"$build/configure.log" 2>&1 \
            && make -j"$(nproc)" >"$build/make.log" 2>&1 \
            && make install DESTDIR="$build/stage" >"$build/install.log" 2>&1 \
            && for module in "${contrib[@]}"; do
                make -C "contrib/$module" install DESTDIR="$build/stage" >>"$build/install.log" 2>&1 || exit 1
            done) \
            || { tail -n 30 "$build"/*.log >&2; exit 1; }
        echo "$built" > "$build/stage$PG18_PREFIX/.configured"
        rm -rf "$PG18_PREFIX"
        mv "$build/stage$PG18_PREFIX" "$PG18_PREFIX"
        rm -rf "$build"
    fi
    if ! grep -qs "^pg18 = \"$pg_config\"" "${PGRX_HOME:-$HOME/.pgrx}/config.toml"; then
        say "registering PostgreSQL $PG18_VERSION with pgrx"
        cargo pgrx init --pg15 "$PG_CONFIG" --pg18 "$pg_config" >/dev/null
    fi
    echo "$pg_config"
}

# Citus from ../shared/vendor, built once into the cached PostgreSQL 18 (about 5 minutes).
CITUS_TARBALL="$REPO/../shared/vendor/citus-main-a3d5708.tar.gz"
ensure_citus() {
    local pg_config="$1" prefix
    prefix="$("$pg_config" --bindir)/.."
    if [ "$(cat "$prefix/.citus" 2>/dev/null)" = "$(basename "$CITUS_TARBALL")" ]; then
        return
    fi
    local packages=(libcurl4-openssl-dev liblz4-dev libzstd-dev libssl-dev) missing=() package
    for package in "${packages[@]}"; do
        dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" \
            || missing+=("$package")
    done
    if [ "${#missing[@]}" -gt 0 ]; then
        say "installing ${missing[*]} (to build Citus)"
        as_root apt-get update -qq
        as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
    fi
    say "building Citus into $prefix (about 5 minutes, once)"
    local build="$PG_EXP_MECH_CACHE/build-citus"
    rm -rf "$build"
    mkdir -p "$build"
    tar xzf "$CITUS_TARBALL" -C "$build"
    # (Outside make's MAKELEVEL, as PostgreSQL's build: ensure_pg18.)
    (unset MAKELEVEL MAKEFLAGS MFLAGS; cd "$build"/citus-* \
        && PG_CONFIG="$pg_config" ./configure >"$build/configure.log" 2>&1 \
        && make -j"$(nproc)" >"$build/make.log" 2>&1 \
        && make install >"$build/install.log" 2>&1) \
        || { tail -n 30 "$build"/*.log >&2; exit 1; }
    basename "$CITUS_TARBALL" > "$prefix/.citus"
    rm -rf "$build"
}

# Builds and installs the extension into the system PostgreSQL.
# $1: "release" or "debug".
install_extension() {
    local profile=(); [ "$1" = debug ] && profile=(--debug)   # package defaults to release
    say "building and installing pg_exp_mech ($1)"
    package_and_place "$1" "${profile[@]}" --pg-config "$PG_CONFIG"
}

# package_and_place NAME [cargo pgrx package args...]: builds a package of the extension
# (target/package-NAME/ mirrors the file system) and puts its files in place with
# place_package. Like `cargo pgrx install`, only cargo's build progress (stderr) shows.
package_and_place() {
    local out="${CARGO_TARGET_DIR:-$REPO/target}/package-$1"; shift
    rm -rf "$out"   # a file left over from an earlier package must not be installed
    (cd "$REPO" && cargo pgrx package "$@" --out-dir "$out") >/dev/null
    place_package "$out"
}

# place_package DIR: installs every file of DIR at its path under /. An installed file is
# never rewritten in place: a process that mapped the old library (every backend of a
# running cluster with it preloaded) would run code that changes under its feet and crash
# (SIGSEGV). A copy under a temporary name in the same directory is renamed over the old
# file instead: the path then names the new file, and running processes keep the old one.
place_package() {
    local dir="$1" file dest tmp mode
    while IFS= read -r -d '' file; do
        dest="/${file#"$dir"/}"
        tmp="$(dirname "$dest")/.$(basename "$dest").new.$$"
        mode=0644; [[ "$dest" == *.so ]] && mode=0755
        as_root install -D -m "$mode" "$file" "$tmp"
        as_root mv -f "$tmp" "$dest"
    done < <(find "$dir" -type f -print0)
}

# The Python environment of the benchmarks (.venv, bench/requirements.txt): OpenDP,
# diffprivlib, psycopg. Re-created when the requirements change.
ensure_bench_venv() {
    if [ ! -x "$REPO/.venv/bin/python" ] || ! cmp -s "$REPO/bench/requirements.txt" "$REPO/.venv/requirements.txt"; then
        say "creating .venv with bench/requirements.txt"
        python3 -m venv "$REPO/.venv"
        "$REPO/.venv/bin/pip" install -q --upgrade pip
        "$REPO/.venv/bin/pip" install -q -r "$REPO/bench/requirements.txt"
        cp "$REPO/bench/requirements.txt" "$REPO/.venv/requirements.txt"
    fi
}

# A TCP port nothing listens on, from $1 upwards.
free_port() {
    local port="${1:-55432}"
    # Free: nothing listens there, and no socket uses it as its local port (an outgoing
    # connection's ephemeral port, 32768-60999 on Linux, such as Citus's between nodes,
    # would make the server's bind fail).
    while (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null \
        || [ -n "$(ss -Htan "( sport = :$port )" 2>/dev/null)" ]; do
        port=$((port + 1))
    done
    echo "$port"
}

# Creates (or re-creates) a cluster in $1 listening on port $2, with the Unix socket in $1,
# and pg_exp_mech preloaded (privacy budgets live in shared memory). Local (socket)
# connections are trusted; TCP connections need a password (scram). Further arguments
# are postgresql.conf lines.
start_cluster() {
    local dir="$1" port="$2"; shift 2
    stop_cluster "$dir"
    as_root rm -rf "$dir"
    mkdir -p "$dir"
    [ "$(id -u)" -eq 0 ] && chown postgres: "$dir"
    as_owner "$(pg_bindir)/initdb" -D "$dir/data" -U postgres --auth-local=trust \
        --auth-host=scram-sha-256 --encoding=UTF8 --locale=C.UTF-8 >/dev/null
    {
        echo "port = $port"
        echo "listen_addresses = '127.0.0.1'"
        echo "unix_socket_directories = '$dir'"
        echo "max_connections = 40"
        echo "shared_preload_libraries = 'pg_exp_mech'"
        for line in "$@"; do echo "$line"; done
    } | as_owner tee -a "$dir/data/postgresql.conf" >/dev/null
    # A Rust backtrace in every error detail helps nobody who runs SQL.
    as_owner env -u RUST_BACKTRACE "$(pg_bindir)/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w start >/dev/null
}

# Installs the package in $2 into a copy of the PostgreSQL installation at $1
# (relocatable: its paths follow its binaries), so that a cluster started with
# PG_CONFIG="$1$("$PG_CONFIG" --bindir)/pg_config" finds this library and SQL under its
# $libdir while another cluster runs the installed one.
install_into_copy() {
    local root="$1" package="$2" dir
    as_root rm -rf "$root.new"
    for dir in "$("$PG_CONFIG" --bindir)/.." "$("$PG_CONFIG" --sharedir)"; do
        dir="$(cd "$dir" && pwd)"
        as_root mkdir -p "$root.new$(dirname "$dir")"
        as_root cp -a "$dir" "$root.new$(dirname "$dir")/"
    done
    as_root cp -a "$package/." "$root.new/"
    as_root rm -rf "$root"
    as_root mv "$root.new" "$root"
}

# The cluster of make bench and make bench-profile in $1 on port $2, with the extension:
# memory enough that percentile_cont sorts in memory (a spilling baseline would flatter
# us) and the tables stay cached; no JIT compilation noise on either side.
start_bench_cluster() {
    start_cluster "$1" "$2" "shared_buffers = '4GB'" "work_mem = '1GB'" "jit = off" \
        "max_parallel_workers_per_gather = 2" "max_parallel_workers = 4"
    cluster_psql "$1" "$2" -q -c "CREATE EXTENSION pg_exp_mech"
}

stop_cluster() {
    local dir="$1"
    if [ -f "$dir/data/postmaster.pid" ]; then
        as_owner "$(pg_bindir)/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null 2>&1 || true
    fi
}

# psql as the superuser over the cluster's socket: cluster_psql DIR PORT [psql args...]
cluster_psql() {
    local dir="$1" port="$2"; shift 2
    "$(pg_bindir)/psql" -X -v ON_ERROR_STOP=1 -h "$dir" -p "$port" -U postgres "$@"
}

# The Python environment of the MovieLens privacy-unit study (.venv-units,
# bench/requirements-units.txt): OpenDP 0.14 with Polars, psycopg. Apart from .venv because
# bench/requirements.txt pins OpenDP 0.13. Re-created when the requirements change.
ensure_units_venv() {
    if [ ! -x "$REPO/.venv-units/bin/python" ] || ! cmp -s "$REPO/bench/requirements-units.txt" "$REPO/.venv-units/requirements.txt"; then
        say "creating .venv-units with bench/requirements-units.txt"
        python3 -m venv "$REPO/.venv-units"
        "$REPO/.venv-units/bin/pip" install -q --upgrade pip
        "$REPO/.venv-units/bin/pip" install -q -r "$REPO/bench/requirements-units.txt"
        cp "$REPO/bench/requirements-units.txt" "$REPO/.venv-units/requirements.txt"
    fi
}
