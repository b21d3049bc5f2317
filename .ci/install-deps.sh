#!/usr/bin/env bash
# Installs the database servers that cdcd's tests start themselves
# (internal/pgtest, internal/mariadbtest): PostgreSQL 15 and MariaDB from
# Debian's apt repository, and promtool (Debian's prometheus package), which
# checks /metrics and examples/prometheus-rules.yml (internal/promtooltest).
# Idempotent: a package whose binary is already present is not installed
# again.
#
# Run as root on Debian 12. Services that the packages would start are kept
# from starting (policy-rc.d answers 101 during the install), and any that
# started anyway are stopped, so no apt-started server holds a port: the tests
# start their own throwaway servers (mariadbd --no-defaults, postgres -D) on
# free ports, in directories of their own.
set -euo pipefail

PG_INITDB=/usr/lib/postgresql/15/bin/initdb

need_pg=0
need_maria=0
need_make=0
need_promtool=0
[[ -x "$PG_INITDB" ]] || need_pg=1
command -v mariadbd >/dev/null 2>&1 || [[ -x /usr/sbin/mariadbd ]] || need_maria=1
command -v make >/dev/null 2>&1 || need_make=1
command -v promtool >/dev/null 2>&1 || need_promtool=1

if (( need_pg || need_maria || need_make || need_promtool )); then
	if [[ $(id -u) -ne 0 ]]; then
		echo "install-deps: must run as root to install packages" >&2
		exit 1
	fi
	pkgs=()
	(( need_pg )) && pkgs+=(postgresql-15)
	(( need_maria )) && pkgs+=(mariadb-server)
	(( need_make )) && pkgs+=(make)
	(( need_promtool )) && pkgs+=(prometheus)

	# Keep apt from starting services. Only remove the policy file if we
	# created it; an existing one (e.g. in containers) stays as it was.
	policy=/usr/sbin/policy-rc.d
	created_policy=0
	if [[ ! -e "$policy" ]]; then
		printf '#!/bin/sh\nexit 101\n' >"$policy"
		chmod 755 "$policy"
		created_policy=1
	fi
	cleanup() {
		if (( created_policy )); then rm -f "$policy"; fi
	}
	trap cleanup EXIT

	export DEBIAN_FRONTEND=noninteractive
	echo "install-deps: installing ${pkgs[*]}"
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null

	# Belt and braces: stop any service the packages started despite the
	# policy (e.g. a systemd unit started by other means). The tests never
	# use it.
	for svc in postgresql mariadb prometheus; do
		if command -v systemctl >/dev/null 2>&1 && [[ -d /run/systemd/system ]]; then
			systemctl disable --now "$svc" >/dev/null 2>&1 || true
		elif [[ -x /etc/init.d/$svc ]]; then
			/etc/init.d/"$svc" stop >/dev/null 2>&1 || true
		fi
	done
fi

echo "install-deps: versions"
"$PG_INITDB" --version
/usr/lib/postgresql/15/bin/postgres --version
if command -v mariadbd >/dev/null 2>&1; then
	mariadbd --version
else
	/usr/sbin/mariadbd --version
fi
promtool --version 2>&1 | head -1
