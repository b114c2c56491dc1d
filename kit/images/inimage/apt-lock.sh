#!/bin/bash
# The image's system packages, from its lock: the Dockerfile's first RUN step calls this.
#
#   apt-lock.sh LOCK MODE PACKAGE...
#
# LOCK is images/NAME.lock. Its '# kit-apt: NAME VERSION ARCH' lines are every Debian/Ubuntu package
# the image's dpkg database held when `kit image lock NAME --system` read it; each is installed at
# exactly that version (up or down from the base's), so two builds of one lock hold the same
# packages. A version the mirror no longer serves stops the build here, naming the package and the
# snapshot of the lock's date ('# kit-lock apt-snapshot: URL') to rebuild from. MODE (`kit image
# build NAME --apt MODE`): locked (the default), snapshot (apt from that snapshot instead of the
# base's mirror), or today (PACKAGE... at the mirror's versions of today, the lock's system part
# ignored: the build to relock it from). A lock without kit-apt lines (not read from a built image
# yet) installs as today does, and says so.
#
# Last, what apt and dpkg write that differs from build to build (their logs, binary caches and
# '-old' copies, ldconfig's aux-cache) is removed: docs/images.md, "Two builds, file by file".
set -euo pipefail
export LC_ALL=C  # one collation for sort and comm
lock=$1 mode=${2:-locked}
shift 2
case "$mode" in
  locked|snapshot|today) ;;
  *) echo "kit: apt mode '$mode' is not locked, snapshot or today" >&2; exit 2 ;;
esac

# The same shape kit/images/system_lock.py accepts (Debian policy's names and versions): nothing
# else in a line reaches apt-get's argv.
valid='^# kit-apt: [a-z0-9][a-z0-9+.-]\+ [0-9][A-Za-z0-9.+~:-]*\( [a-z0-9-]\+\)\?$'
if bad=$(grep '^# kit-apt:' "$lock" | grep -v "$valid" | head -n 1) && [ -n "$bad" ]; then
  echo "kit: $lock: not a Debian package, version and architecture: $bad" >&2
  exit 2
fi
locked=$(grep "$valid" "$lock" | sed 's/^# kit-apt: \([^ ]*\) \([^ ]*\).*$/\1=\2/' || true)
snapshot_url=$(sed -n 's/^# kit-lock apt-snapshot: \(.*\)$/\1/p' "$lock")

if [ "$mode" = today ]; then
  locked=""
fi
if [ "$mode" = snapshot ]; then
  if [ -z "$snapshot_url" ]; then
    echo "kit: --apt snapshot: $lock names no snapshot (it has no system packages yet)" >&2
    exit 1
  fi
  # The snapshot's archive is the lock's own: debian -> debian-security beside it, ubuntu for both.
  security_url=${snapshot_url/\/archive\/debian\//\/archive\/debian-security\/}
  echo "kit: apt from the snapshot $snapshot_url (and $security_url for security updates)"
  echo 'Acquire::Check-Valid-Until "false";' > /etc/apt/apt.conf.d/99kit-snapshot
  for file in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
    [ -f "$file" ] || continue
    sed -i -E \
      -e "s#https?://(deb|ftp[.a-z]*)\.debian\.org/debian-security/?#${security_url}#g" \
      -e "s#https?://(deb|ftp[.a-z]*)\.debian\.org/debian/?#${snapshot_url}#g" \
      -e "s#https?://(archive|security|[a-z]+\.archive)\.ubuntu\.com/ubuntu/?#${snapshot_url}#g" \
      "$file"
  done
fi

apt-get update -q

if [ -z "$locked" ]; then
  why="$lock holds no system packages yet"
  [ "$mode" = today ] && why="--apt today"
  echo "kit: $why: installing $* at the mirror's versions of today (unpinned);" \
       "'kit image lock NAME --system' records them from the built image"
  apt-get install -y -q --no-install-recommends "$@"
else
  # Those not already installed at their version, and among them every one the mirror lacks (one
  # apt-cache madison call: it lists each version the sources serve; `apt-cache show pkg=version`
  # says nothing of a version it does not know).
  todo=()
  while IFS='=' read -r name version; do
    now=$(dpkg-query -W -f='${db:Status-Abbrev}${Version}' "$name" 2>/dev/null || true)
    [ "$now" = "ii $version" ] || todo+=("$name=$version")
  done <<< "$locked"
  if [ "${#todo[@]}" -gt 0 ]; then
    served=$(apt-cache madison "${todo[@]%%=*}" 2>/dev/null \
             | awk -F'|' '{gsub(/ /, "", $1); gsub(/ /, "", $2); print $1 "=" $2}' | sort -u)
    missing=$(comm -23 <(printf '%s\n' "${todo[@]}" | sort -u) <(printf '%s\n' "$served") | tr '=' ' ')
  else
    missing=""
  fi
  if [ -n "$missing" ]; then
    count=$(printf '%s\n' "$missing" | wc -l)
    first=$(printf '%s\n' "$missing" | head -n 1)
    echo "kit: $count locked system package version(s) not served by the mirror, first: $first" >&2
    printf '%s\n' "$missing" | head -n 20 | sed 's/^/  /' >&2
    echo "kit: rebuild from the snapshot of the lock's date: ${snapshot_url:-none recorded}" \
         "(kit image build NAME --apt snapshot), or relock: kit image build NAME --apt today," \
         "then kit image lock NAME --system" >&2
    exit 1
  fi
  echo "kit: ${#todo[@]} of $(printf '%s\n' "$locked" | wc -l) locked system packages to install"
  if [ "${#todo[@]}" -gt 0 ]; then
    apt-get install -y -q --no-install-recommends --allow-downgrades "${todo[@]}"
  fi
  extra=$(comm -13 <(printf '%s\n' "$locked" | cut -d= -f1 | sort) \
                   <(dpkg-query -W -f='${db:Status-Abbrev} ${Package}\n' | awk '$1 == "ii" {print $2}' | sort))
  if [ -n "$extra" ]; then
    echo "kit: the base holds packages the lock does not: $(echo $extra) (kit image verify lists them)"
  fi
fi

apt-get clean
rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/log/apt/* /var/log/dpkg.log \
       /var/log/alternatives.log /var/cache/ldconfig/aux-cache /var/cache/debconf/*-old \
       /var/lib/dpkg/*-old /etc/apt/apt.conf.d/99kit-snapshot
