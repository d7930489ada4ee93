. /opt/dev-script-0/common.sh
rebuild supervisor cmd/supervisor/supervisor.py "        if s.get('MainPID') != pid:
            raise Reject(E_AUTH, 'peer is not the MainPID of ' + PEER_UNIT)" "        pass  # FAULT: any process of the peer unit is accepted"
