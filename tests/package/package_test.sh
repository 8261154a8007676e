#!/usr/bin/env bash
# package_test: makes the .deb with cpack from a build directory, checks its
# control data, unpacks it with dpkg -x into a scratch root and checks every
# file it should install (and that it installs nothing else outside its doc
# directory), then runs the unpacked binary. Needs no root: nothing is
# installed on the system. Every failure is one line naming what is wrong.
#
#   package_test.sh BUILD_DIR SOURCE_DIR CPACK VERSION
set -euo pipefail

if [ $# -ne 4 ]; then
  echo "usage: $0 BUILD_DIR SOURCE_DIR CPACK VERSION" >&2
  exit 2
fi
build=$1 src=$2 cpack=$3 version=$4

scratch=$(mktemp -d "${TMPDIR:-/tmp}/akadzed-package-test.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
root=$scratch/root

failures=0
fail() { echo "package_test: FAIL: $*" >&2; failures=$((failures + 1)); }
die() { echo "package_test: FAIL: $*" >&2; exit 1; }
for tool in dpkg-deb gzip; do
  command -v "$tool" >/dev/null || die "$tool not found (apt install dpkg)"
done

# --- The package ----------------------------------------------------------
if ! "$cpack" -G DEB --config "$build/CPackConfig.cmake" -B "$scratch/out" \
    >"$scratch/cpack.log" 2>&1; then
  cat "$scratch/cpack.log" >&2
  die "cpack -G DEB failed in $build (its output is above)"
fi
shopt -s nullglob
debs=("$scratch"/out/akadzed_*.deb)
shopt -u nullglob
[ ${#debs[@]} -eq 1 ] || die "cpack made ${#debs[@]} akadzed_*.deb files, expected 1: $(ls "$scratch/out")"
deb=${debs[0]}
arch=$(dpkg --print-architecture)
[ "$(basename "$deb")" = "akadzed_${version}_${arch}.deb" ] ||
  fail "package file is $(basename "$deb"), expected akadzed_${version}_${arch}.deb"

# --- Control data ---------------------------------------------------------
field() { dpkg-deb --field "$deb" "$1"; }
expect_field() {
  local value
  value=$(field "$1")
  [ "$value" = "$2" ] || fail "control field $1 is '$value', expected '$2'"
}
expect_field Package akadzed
expect_field Version "$version"
expect_field Architecture "$arch"
expect_field Section admin
[ -n "$(field Maintainer)" ] || fail "control field Maintainer is empty"
[ -n "$(field Description)" ] || fail "control field Description is empty"
depends=$(field Depends)
[ -n "$depends" ] || fail "control field Depends is empty"
# The package names alone, one a line ("libpq5 (>= 9.0~), a | b" -> libpq5, a, b).
depends_names=$(sed -E 's/\([^)]*\)//g; s/[,|]/\n/g' <<<"$depends" | awk 'NF {print $1}')
for lib in 'libc6' 'libstdc\+\+6' 'libpq5' 'libspdlog[0-9.]+.*' 'libfmt[0-9]+' 'libyaml-cpp[0-9.]+' 'libdate-tz[0-9]+' 'tzdata'; do
  grep -Eqx "$lib" <<<"$depends_names" || fail "Depends lacks ${lib//\\/}: $depends"
done

dpkg-deb --control "$deb" "$scratch/control"
# The config and the handlers of config/handlers/ it refers to.
expected_conffiles=$(
  echo /etc/akadzed/akadzed.yaml
  for handler in "$src"/config/handlers/*; do echo "/etc/akadzed/handlers/$(basename "$handler")"; done
)
expected_conffiles=$(sort <<<"$expected_conffiles")
if [ ! -f "$scratch/control/conffiles" ]; then
  fail "control file conffiles missing"
elif [ "$(sort "$scratch/control/conffiles")" != "$expected_conffiles" ]; then
  fail "conffiles is '$(tr '\n' ' ' <"$scratch/control/conffiles")', expected '${expected_conffiles//$'\n'/ }'"
fi
for script in postinst prerm postrm; do
  file=$scratch/control/$script
  if [ ! -f "$file" ]; then
    fail "maintainer script $script missing"
    continue
  fi
  [ -x "$file" ] || fail "maintainer script $script is not executable"
  sh -n "$file" || fail "maintainer script $script: syntax error (sh -n)"
  # The operator configures the database first: no script may enable or
  # start the service.
  if grep -v '^[[:space:]]*#' "$file" | grep -Eqw 'enable|start|--now'; then
    fail "maintainer script $script enables or starts akadzed.service"
  fi
done
grep -q 'systemd-sysusers' "$scratch/control/postinst" || fail "postinst does not run systemd-sysusers"
grep -q 'systemd-tmpfiles --create' "$scratch/control/postinst" ||
  fail "postinst does not run systemd-tmpfiles --create"
grep -q 'daemon-reload' "$scratch/control/postinst" || fail "postinst does not run systemctl daemon-reload"

# Every file belongs to root.
owners=$(dpkg-deb --contents "$deb" | awk '{print $2}' | sort -u)
[ "$owners" = "root/root" ] || fail "files are owned by '${owners//$'\n'/ }', expected root/root only"

# --- Files ----------------------------------------------------------------
dpkg-deb --extract "$deb" "$root"

declare -A expected=()
# expect PATH MODES: PATH (relative to /) is a regular file with one of the
# modes MODES (e.g. 644 or 644|755).
expect() {
  local path=$1 modes=$2 actual
  expected[$path]=1
  if [ ! -e "$root/$path" ]; then
    fail "/$path missing from the package"
  elif [ ! -f "$root/$path" ]; then
    fail "/$path is not a regular file"
  else
    actual=$(stat -c %a "$root/$path")
    [[ $actual =~ ^($modes)$ ]] || fail "/$path has mode $actual, expected ${modes//|/ or }"
  fi
}
expect usr/bin/akadzed 755
expect usr/lib/akadzed/plugins/libakadzed_example.so '644|755'  # CMake installs modules 755
expect usr/include/akadzed/plugin.h 644
expect usr/lib/systemd/system/akadzed.service 644
expect usr/lib/sysusers.d/akadzed.conf 644
expect usr/lib/tmpfiles.d/akadzed.conf 644
expect etc/akadzed/akadzed.yaml 644
for handler in "$src"/config/handlers/*; do
  expect "etc/akadzed/handlers/$(basename "$handler")" 755
done
expect usr/share/man/man8/akadzed.8.gz 644
expect usr/share/man/man5/akadzed.yaml.5.gz 644
for sql in "$src"/migrations/[0-9][0-9][0-9]_*.sql; do
  name=usr/share/akadzed/migrations/$(basename "$sql")
  expect "$name" 644
  [ ! -f "$root/$name" ] || cmp -s "$sql" "$root/$name" || fail "/$name differs from migrations/$(basename "$sql")"
done
expect usr/share/doc/akadzed/README.md 644
for doc in "$src"/docs/*.md; do
  expect "usr/share/doc/akadzed/docs/$(basename "$doc")" 644
done

# Nothing else, apart from more documentation: no test program, test plugin
# or benchmark.
while IFS= read -r -d '' path; do
  path=${path#"$root"/}
  [ -n "${expected[$path]:-}" ] || [[ $path == usr/share/doc/akadzed/* ]] ||
    fail "/$path is in the package but not expected (a test or build artifact?)"
done < <(find "$root" \( -type f -o -type l \) -print0)
writable=$(find "$root" -perm /022 ! -type l -printf '/%P ')
[ -z "$writable" ] || fail "group- or world-writable in the package: $writable"

# --- The unit, the user and the state directory ---------------------------
unit=$root/usr/lib/systemd/system/akadzed.service
if [ -f "$unit" ]; then
  for key in ExecStartPre ExecStart; do
    line=$(grep -E "^${key}=" "$unit" | head -n1)
    [ -n "$line" ] || { fail "akadzed.service has no $key="; continue; }
    exe=${line#*=}
    exe=${exe%% *}
    exe=${exe#[-@:+!]}
    if [ ! -f "$root$exe" ] || [ ! -x "$root$exe" ]; then
      fail "akadzed.service $key= runs $exe, which the package does not install as an executable"
    fi
    config=$(grep -Eo '(--config |check-config )[^ ]+' <<<"$line" | awk '{print $2}')
    if [ -z "$config" ] || [ ! -f "$root$config" ]; then
      fail "akadzed.service $key= reads config '${config}', which the package does not install"
    fi
  done
  grep -qx 'User=akadzed' "$unit" || fail "akadzed.service does not run as User=akadzed"
  grep -q 'WantedBy=multi-user.target' "$unit" || fail "akadzed.service has no WantedBy=multi-user.target"
fi
sysusers=$root/usr/lib/sysusers.d/akadzed.conf
[ ! -f "$sysusers" ] || grep -Eq '^u[[:space:]]+akadzed[[:space:]]' "$sysusers" ||
  fail "/usr/lib/sysusers.d/akadzed.conf does not create the user akadzed"
tmpfiles=$root/usr/lib/tmpfiles.d/akadzed.conf
[ ! -f "$tmpfiles" ] ||
  grep -Eq '^d[[:space:]]+/var/lib/akadzed[[:space:]]+[0-7]+[[:space:]]+akadzed[[:space:]]+akadzed' "$tmpfiles" ||
  fail "/usr/lib/tmpfiles.d/akadzed.conf does not create /var/lib/akadzed owned by akadzed"

# --- Man pages: valid gzip, a man header, and the docs in them ------------
check_man() {
  local page=$1 title=$2 doc=$3 roff heading
  [ -f "$root/$page" ] || return 0
  if ! roff=$(gzip -dc "$root/$page" 2>/dev/null); then
    fail "/$page is not valid gzip"
    return
  fi
  grep -q "^\.TH $title " <<<"$roff" || fail "/$page has no '.TH $title' header"
  grep -q '^\.SH NAME' <<<"$roff" || fail "/$page has no NAME section"
  # Generated from the doc: each of its plain "## " headings (outside code
  # blocks) is a section.
  while IFS= read -r heading; do
    grep -qxF ".SH $heading" <<<"$roff" || fail "/$page lacks the section '$heading' of docs/$doc"
  done < <(awk '/^```/ {code = !code; next} !code && /^## [A-Za-z0-9 ,]+$/ {print substr($0, 4)}' \
             "$src/docs/$doc")
}
check_man usr/share/man/man8/akadzed.8.gz 'AKADZED 8' cli.md
check_man usr/share/man/man5/akadzed.yaml.5.gz 'AKADZED.YAML 5' configuration.md

# --- The unpacked binary runs ---------------------------------------------
bin=$root/usr/bin/akadzed
if [ -x "$bin" ]; then
  if ! out=$("$bin" --version 2>&1); then
    fail "/usr/bin/akadzed --version failed: $out"
  elif [ "$out" != "akadzed $version" ]; then
    fail "/usr/bin/akadzed --version printed '$out', expected 'akadzed $version'"
  fi
  # The shipped config is valid as installed: its shell handler is where it
  # points, and the example plugin is found by its bare name through the
  # binary's own location (<bin>/../lib/akadzed/plugins).
  if ! out=$(env -u AKADZED_PLUGIN_PATH "$bin" check-config "$root/etc/akadzed/akadzed.yaml" 2>&1); then
    fail "/usr/bin/akadzed check-config /etc/akadzed/akadzed.yaml failed: $out"
  fi
fi

if [ "$failures" -ne 0 ]; then
  echo "package_test: $failures failure(s) in $(basename "$deb")" >&2
  exit 1
fi
echo "package_test: ok: $(basename "$deb"), $(find "$root" -type f | wc -l) files, Depends: $depends"
