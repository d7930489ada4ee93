. /opt/dev-script-0/common.sh
plain_node 24.16.0
