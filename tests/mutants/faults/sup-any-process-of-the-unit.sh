. /opt/dev-script-0/common.sh
# The fault in the deployed implementation: Go (the default) or Python (--supervisor python).
if [ "$(impl)" = python ]; then
rebuild supervisor cmd/supervisor/supervisor.py "        if s.get('MainPID') != pid:
            raise Reject(E_AUTH, 'peer is not the MainPID of ' + PEER_UNIT)" "        pass  # FAULT: any process of the peer unit is accepted"
else
rebuild supervisor cmd/supervisor/peer.go '	if mainPID != uint32(pid) {
		return nil, rejectf(eAuth, "peer is not the MainPID of %s", peerUnit)
	}
' '	_ = mainPID // FAULT: any process of the peer unit is accepted
'
fi
