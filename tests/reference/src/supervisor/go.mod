module opencode-pty

go 1.19
