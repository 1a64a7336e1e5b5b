#!/bin/sh
# Installs the Prometheus tools the tests drive: promtool and prometheus (rule unit
# tests, `check metrics`, a live server scraping sentinel) and blackbox_exporter
# (the baseline an operator would point at vLLM instead of sentinel). Debian's
# packages are used as they are what a Debian/Ubuntu machine has at hand.
#
# The packages ship system services. Tests start their own servers on free ports,
# so no daemon may be left running: service starts are denied while installing
# (policy-rc.d), and anything the packages started anyway is stopped and disabled.
set -eu

PACKAGES="prometheus prometheus-blackbox-exporter"
SERVICES="prometheus prometheus-blackbox-exporter"

missing() {
    for tool in promtool prometheus prometheus-blackbox-exporter; do
        command -v "$tool" >/dev/null 2>&1 || return 0
    done
    return 1
}

if ! missing; then
    exit 0
fi

cannot_install() {
    cat >&2 <<MSG
prometheus-tools: $1
Install these yourself, then run the tests again:
  Debian/Ubuntu:  apt-get install --no-install-recommends prometheus prometheus-blackbox-exporter
  elsewhere:      prometheus + promtool (2.42 or later) and blackbox_exporter (0.23 or later)
                  from the Prometheus project's release archives, on PATH as
                  promtool, prometheus and prometheus-blackbox-exporter.
Without them the Prometheus tests skip (tests/prometheus), or fail where CI is set.
MSG
    exit 1
}

command -v apt-get >/dev/null 2>&1 || cannot_install "apt-get is not available on this machine."
[ "$(id -u)" = 0 ] || cannot_install "installing needs root (apt-get); this is uid $(id -u)."

start=$(date +%s)

# Deny service starts while the packages configure, unless a policy already exists.
policy=/usr/sbin/policy-rc.d
own_policy=0
if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy"
    chmod 755 "$policy"
    own_policy=1
fi
restore_policy() {
    if [ "$own_policy" = 1 ]; then rm -f "$policy"; fi
}
trap restore_policy EXIT

export DEBIAN_FRONTEND=noninteractive
# A machine whose package lists were never fetched (or were cleaned) knows no candidates.
if ! apt-cache show prometheus prometheus-blackbox-exporter >/dev/null 2>&1; then
    apt-get update -qq || cannot_install "apt-get update failed."
fi
# shellcheck disable=SC2086
apt-get install -y -qq --no-install-recommends $PACKAGES >/dev/null \
    || cannot_install "apt-get install $PACKAGES failed."

# Stop and disable whatever the packages started or enabled anyway.
for service in $SERVICES; do
    if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
        systemctl disable --now "$service" >/dev/null 2>&1 || true
    else
        if [ -x "/etc/init.d/$service" ]; then
            "/etc/init.d/$service" stop >/dev/null 2>&1 || true
        fi
        if command -v update-rc.d >/dev/null 2>&1; then
            update-rc.d "$service" disable >/dev/null 2>&1 || true
        fi
    fi
done
# The packages run their daemons as the `prometheus` user; tests run theirs as
# whoever runs the tests, so a process left under that user is a service.
if id prometheus >/dev/null 2>&1 && pgrep -u prometheus >/dev/null 2>&1; then
    echo "prometheus-tools: a service of these packages is still running:" >&2
    pgrep -a -u prometheus >&2 || true
    echo "prometheus-tools: stop it (its init script or systemctl); tests start their own." >&2
fi

missing && cannot_install "installed $PACKAGES, yet a tool is still not on PATH."
echo "prometheus-tools: installed $PACKAGES in $(( $(date +%s) - start )) s" >&2
