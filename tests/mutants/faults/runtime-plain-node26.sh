. /opt/dev-script-0/common.sh
plain_node 26.4.0
