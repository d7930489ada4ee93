"""Boot a reference host, run deploy.sh, then the throwaway peer scenarios.

    python3 -m tests.reference.selftest.live [scenario...]   (from the repo root, as root)
"""
import pathlib
import sys
import time

REPO = pathlib.Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO))
from tests.refhost.machine import Machine  # noqa: E402
from tests.refhost.tree import ensure_tree  # noqa: E402

SRC = '/opt/pty-acceptance/src'


def main():
    scen = sys.argv[1:] or ['basic']
    tree = ensure_tree()
    with Machine(tree, binds=[(str(REPO), SRC, True)]) as m:
        t0 = time.monotonic()
        r = m.run(['/bin/sh', f'{SRC}/tests/reference/deploy.sh'], timeout=600)
        print(f'deploy rc={r.returncode} in {time.monotonic() - t0:.1f} s')
        sys.stdout.write(r.stderr.decode()[-3000:])
        if r.returncode != 0:
            print(m.run(['journalctl', '--no-pager', '-n', '60']).stdout.decode())
            return 1
        for check in (['systemd-analyze', 'verify', '/etc/systemd/system/opencode-pty-supervisor.service',
                       '/etc/systemd/system/opencode-pty.slice',
                       '/home/byk/.local/share/opencode-v2-pilot/opencode-v2.service'],
                      ['systemctl', 'show', '-p', 'LoadState,ActiveState,SubState,FragmentPath,User,NoNewPrivileges,MainPID,ExecMainPID', 'opencode-pty-supervisor.service'],
                      ['ls', '-la', '/run/opencode-pty/']):
            r = m.run(check)
            print('$', ' '.join(check), 'rc', r.returncode)
            print(r.stdout.decode(), r.stderr.decode())
        for pre in [a for a in scen if a.endswith('.sh')]:
            r = m.run(['/bin/sh', f'{SRC}/tests/reference/selftest/' + pre], timeout=120)
            print(pre, 'rc', r.returncode, r.stdout.decode(), r.stderr.decode())
        scen = [a for a in scen if not a.endswith('.sh')]
        t0 = time.monotonic()
        r = m.run(['systemd-run', '--unit=opencode-v2.service', '-p', 'User=byk', '-p', 'Group=byk',
                   '--wait', '--pipe', '--quiet', '--collect', '--',
                   '/usr/bin/python3', f'{SRC}/tests/reference/selftest/peer.py', *scen], timeout=300)
        print(f'peer rc={r.returncode} in {time.monotonic() - t0:.1f} s')
        print(r.stdout.decode())
        print(r.stderr.decode()[-2000:])
        r = m.run(['/bin/sh', f'{SRC}/tests/reference/selftest/post.sh'], timeout=60)
        print('post.sh', r.stdout.decode(), r.stderr.decode())
        print(m.run(['journalctl', '--no-pager', '-u', 'opencode-pty-supervisor.service', '-n', '80']).stdout.decode())
        if '--keep' in scen:
            input('keeping; press enter')
    return 0


if __name__ == '__main__':
    sys.exit(main())
