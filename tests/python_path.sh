# python_path.sh - sourced by tests/run.sh, .ci/run and tests/integration/lib.sh:
# make "python3" mean Debian's /usr/bin/python3.
#
# deploy/install-deps.sh installs python3-redis and python3-psycopg2 for that
# interpreter, and the tests start it a few thousand times. A version
# manager's directory ahead of /usr/bin on PATH (pyenv's shims, which are
# shell scripts) would pick another interpreter, without those modules, and
# costs about 0.35 s of CPU per start on a 2-core CI machine (0.035 s for
# /usr/bin/python3): about 30 % of the time of the tests it was measured on. So every PATH
# entry before /usr/bin that holds its own python3 is left out; nothing
# changes where /usr/bin/python3 is missing or already comes first.
if [ -x /usr/bin/python3 ] && [ "$(command -v python3 || true)" != /usr/bin/python3 ]; then
	_pp_new=
	_pp_seen_usr_bin=0
	IFS=: read -ra _pp_dirs <<<"$PATH"
	for _pp_d in "${_pp_dirs[@]}"; do
		[ "$_pp_d" = /usr/bin ] && _pp_seen_usr_bin=1
		if [ "$_pp_seen_usr_bin" = 0 ] && [ -e "$_pp_d/python3" ]; then
			continue
		fi
		_pp_new=${_pp_new:+$_pp_new:}$_pp_d
	done
	PATH=$_pp_new
	export PATH
	hash -r
	unset _pp_new _pp_seen_usr_bin _pp_dirs _pp_d
fi
