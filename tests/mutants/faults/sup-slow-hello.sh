. /opt/dev-script-0/common.sh
rebuild supervisor cmd/supervisor/supervisor.py "        self.send_now(frame(T_HELLO_OK, inv))" "        time.sleep(6)  # FAULT: a handshake slower than its 5 s bound
        self.send_now(frame(T_HELLO_OK, inv))"
