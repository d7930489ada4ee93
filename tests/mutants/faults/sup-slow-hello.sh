. /opt/dev-script-0/common.sh
# The fault in the deployed implementation: Go (the default) or Python (--supervisor python).
if [ "$(impl)" = python ]; then
rebuild supervisor cmd/supervisor/supervisor.py "        self.send_now(frame(T_HELLO_OK, inv))" "        time.sleep(6)  # FAULT: a handshake slower than its 5 s bound
        self.send_now(frame(T_HELLO_OK, inv))"
else
rebuild supervisor cmd/supervisor/conn.go '	if err := c.sendNow(encode(tHelloOK, p.inv), writeTimeout); err != nil {' '	time.Sleep(6 * time.Second) // FAULT: a handshake slower than its 5 s bound
	if err := c.sendNow(encode(tHelloOK, p.inv), writeTimeout); err != nil {'
fi
