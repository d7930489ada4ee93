python3 /opt/pty-acceptance/src/tests/reference/selftest/pin.py
