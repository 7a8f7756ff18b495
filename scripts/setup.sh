#!/usr/bin/env bash
# Idempotent set-up for a fresh Debian machine (run as root): Debian
# packages, a pinned virtual environment, the Go binaries. Every step checks
# first, so a second run costs a few seconds.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(zmap tshark ngtcp2-client ngtcp2-server caddy iproute2 dnsmasq-base libclang-dev cmake
              chromium firefox-esr libnss3-tools libcap2-bin procps iperf3 ethtool)
APT_PACKAGES+=(openjdk-17-jdk-headless maven)  # jvmlab: the lab's Java servers (block below)
APT_PACKAGES+=(slurm-wlm)  # bench_campaign: a one-node Slurm cluster runs the campaign's array job file
APT_PACKAGES+=(openssh-server)  # test_replay_twohost: the ssh launcher against an sshd the test starts in a namespace
APT_PACKAGES+=(linux-perf strace)  # qreplay --profile: perf samples the stacks; strace shows their socket calls
missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  # tshark asks whether non-root users may capture; answer for it.
  echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections
  apt-get update -q >/dev/null
  apt-get install -y -q "${missing[@]}" >/dev/null
fi

PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null || PYTHON=python3
stamp=.venv/.installed
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv"
  "$PYTHON" -m venv .venv
fi
want=$(cat requirements.lock pyproject.toml | sha256sum | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "setup: installing Python packages (pinned, requirements.lock)"
  .venv/bin/pip install -q --upgrade pip==24.3.1
  .venv/bin/pip install -q -r requirements.lock
  .venv/bin/pip install -q --no-deps -e .
  echo "$want" > "$stamp"
fi
# The project's own modules byte-compiled (an editable install leaves them as source): where PYTHONDONTWRITEBYTECODE
# is set, as on the test machine, every process would compile anew each one it imports, 0.27 s of CPU for the ~150
# of a browser run's qreplay, and the test suite starts a few hundred (2026-11-28). A fraction of a second when
# up to date; a module edited since is compiled in memory, as before.
.venv/bin/python -m compileall -q -j0 tparams common lab scanner replay demo docs_build

# qscan's compiled per-packet steps (scanner/native: opening client Initials, CRYPTO reassembly), a Python extension module
# built with cargo (pyo3, pinned in its Cargo.lock) into the cache outside the clone under a key of its
# sources, and copied into .venv's site-packages. Always built: the scanner and the capture reader have no Python twin of it.
native=scanner/native
if [ -f $native/Cargo.toml ]; then
  command -v cargo >/dev/null || { echo "setup: cargo is missing (qscan's compiled part needs it)" >&2; exit 1; }
  key=$( { rustc -V; .venv/bin/python -V; find $native -type f -not -path '*/target/*' -print0 | sort -z | xargs -0 sha256sum; } | sha256sum | cut -c1-16)
  built=${XDG_CACHE_HOME:-$HOME/.cache}/quictp/native/qscan_native-$key.so
  if [ ! -f "$built" ]; then
    echo "setup: cargo build $native"
    CARGO_TARGET_DIR=${XDG_CACHE_HOME:-$HOME/.cache}/quictp/cargo-target PYO3_PYTHON=$PWD/.venv/bin/python \
      cargo build -q --release --locked -j2 --manifest-path $native/Cargo.toml
    mkdir -p "$(dirname "$built")"
    install -m644 "${XDG_CACHE_HOME:-$HOME/.cache}/quictp/cargo-target/release/libqscan_native.so" "$built"
  fi
  site=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["platlib"])')
  cmp -s "$built" "$site/qscan_native.abi3.so" || install -m644 "$built" "$site/qscan_native.abi3.so"
fi

# The lab's picoquic server runs on aiopquic (picoquic bundled), which needs Python
# >= 3.12: its own environment, pinned in requirements.lock, from pyenv's 3.12 where
# the system has none. Without one the lab simply has no picoquic server.
aiopquic=$(sed -n 's/^\(aiopquic==[^ ;]*\).*/\1/p' requirements.lock)
if [ "$(cat .venv-picoquic/.installed 2>/dev/null)" != "$aiopquic" ]; then
  py312=
  for candidate in python3.12 "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12.*/bin/python; do
    # (pyenv's shims answer to names whose version is not selected, and fail)
    if "$candidate" -c 'import sys; assert sys.version_info >= (3, 12)' 2>/dev/null; then py312=$candidate; break; fi
  done
  if [ -n "$py312" ]; then
    echo "setup: creating .venv-picoquic ($aiopquic)"
    "$py312" -m venv .venv-picoquic
    .venv-picoquic/bin/pip install -q "$aiopquic"
    echo "$aiopquic" > .venv-picoquic/.installed
  else
    echo "setup: no Python 3.12 here; the lab runs without its picoquic server" >&2
  fi
fi

if [ -f go.mod ]; then
  mkdir -p build/bin
  for main in $(go list -f '{{if eq .Name "main"}}{{.Dir}}{{end}}' ./... 2>/dev/null); do
    name=$(basename "$main")
    bin=build/bin/$name
    # the program's own package and the module's packages it imports (lab/servers/golab, replay/quicgo/bulk)
    sources=$(go list -deps -f '{{.Dir}}' "./${main#$PWD/}" | grep "^$PWD/")
    newest=$(find $sources go.mod go.sum -maxdepth 1 -newer "$bin" 2>/dev/null | head -n1 || true)
    if [ ! -x "$bin" ] || [ -n "$newest" ]; then
      echo "setup: go build $name"
      go build -o "$bin" "./${main#$PWD/}"
    fi
  done
fi

# The Rust programs of lab/servers, one package each: the lab's servers
# (lab-<library>, found by lab/kinds/built.py) and qreplay's clients and
# servers (replay-<library>, found by replay/stacks/base.py). Built one at a
# time (-j2: the machine has two cores) into a target dir outside the clone,
# and kept there under a key of their sources, so that a second run or
# another clone of the same sources only copies them into build/bin.
if [ -f lab/servers/Cargo.toml ]; then
  command -v cargo >/dev/null || { echo "setup: cargo is missing (the lab's Rust servers need it)" >&2; exit 1; }
  cache=${XDG_CACHE_HOME:-$HOME/.cache}/quictp
  export CARGO_TARGET_DIR=$cache/cargo-target
  mkdir -p build/bin
  for dir in lab/servers/*/; do
    dir=${dir%/}
    [ -f "$dir/Cargo.toml" ] && [ -f "$dir/src/main.rs" ] || continue  # Maven's, and the shared crate
    name=$(sed -n 's/^name = "\(.*\)"$/\1/p' "$dir/Cargo.toml" | head -n1)
    key=$( { rustc -V; find "$dir" lab/servers/common -type f -print0 | sort -z | xargs -0 sha256sum;
             sha256sum lab/servers/Cargo.toml lab/servers/Cargo.lock; } | sha256sum | cut -c1-16)
    built=$cache/lab-servers/$name-$key
    if [ ! -x "$built/$name" ]; then
      echo "setup: cargo build $name"
      cargo build -q --release --locked -j2 --manifest-path lab/servers/Cargo.toml -p "$name"
      mkdir -p "$built"
      install -m755 "$CARGO_TARGET_DIR/release/$name" "$built/"
      # The msquic programs load the crate's libmsquic.so.2 from beside themselves (rpath $ORIGIN).
      if [ "${name#*-}" = msquic ]; then
        install -m644 "$(ls -t "$CARGO_TARGET_DIR"/release/build/msquic-*/out/lib/libmsquic.so.2 | head -n1)" "$built/"
      fi
    fi
    for file in "$built"/*; do
      cmp -s "$file" "build/bin/${file##*/}" || install -m "$(stat -c %a "$file")" "$file" build/bin/
    done
  done
fi
# inferno (the Rust port of FlameGraph) draws `qreplay plot --profile`'s flame graphs: pinned, built once
# into the cache outside the clone, copied into build/bin.
inferno_version=0.12.8
inferno_root=${XDG_CACHE_HOME:-$HOME/.cache}/quictp/inferno-$inferno_version
if [ ! -x "$inferno_root/bin/inferno-flamegraph" ]; then
  command -v cargo >/dev/null || { echo "setup: cargo is missing (inferno needs it)" >&2; exit 1; }
  echo "setup: cargo install inferno@$inferno_version"
  cargo install -q --locked "inferno@$inferno_version" --root "$inferno_root" -j2
fi
mkdir -p build/bin
cmp -s "$inferno_root/bin/inferno-flamegraph" build/bin/inferno-flamegraph \
  || install -m755 "$inferno_root/bin/inferno-flamegraph" build/bin/
# ---- jvmlab: the lab's Java servers (lab/servers/<library>/pom.xml) --------------
# Maven (its cache ~/.m2) builds each into one jar named by the hash of its
# sources, outside the clone; lab/builds.py finds it by the same hash, so a
# second run, or a fresh clone on this machine, builds nothing.
lab_servers=${XDG_CACHE_HOME:-$HOME/.cache}/quictp/lab-servers
for pom in lab/servers/*/pom.xml; do
  src=$(dirname "$pom")
  library=$(basename "$src")
  # (its own sources and the command line every Java server shares, lab/servers/java-common)
  hash=$(cd "$src" && find . ../java-common -type f -not -path './target/*' | LC_ALL=C sort | xargs sha256sum | sha256sum | cut -c1-16)
  jar=$lab_servers/$library-$hash.jar
  if [ ! -f "$jar" ]; then
    echo "setup: building the $library lab server (Maven)"
    mkdir -p "$lab_servers"
    # (sed: Debian's Maven prints colour resets even when told not to)
    mvn -q -B -f "$pom" package -Dlab.build.dir="$lab_servers/build/$library" 2>&1 | sed 's/\x1b\[[0-9;]*m//g'
    cp "$lab_servers/build/$library/lab-server.jar" "$jar.tmp" && mv "$jar.tmp" "$jar"
    find "$lab_servers" -maxdepth 1 -name "$library-*.jar" ! -name "${jar##*/}" -delete
  fi
done
# ---- end jvmlab -------------------------------------------------------------------

# qreplay's TCP reference (curl against caddy) runs --cc cubic or bbr in the server's namespace: a namespace
# may choose only the host's allowed congestion controls (this machine allows "reno bbr"), so add the
# missing ones among those the kernel has (adding only; the host's default is left as it is).
allowed=/proc/sys/net/ipv4/tcp_allowed_congestion_control
if [ -w "$allowed" ]; then
  want=$(cat "$allowed")
  for cc in cubic bbr; do
    if grep -qw "$cc" /proc/sys/net/ipv4/tcp_available_congestion_control && ! grep -qw "$cc" <<<"$want"; then
      want="$want $cc"
    fi
  done
  if [ "$want" != "$(cat "$allowed")" ]; then
    echo "setup: letting network namespaces choose TCP congestion control $want"
    echo "$want" > "$allowed"
  fi
fi
