#!/bin/sh
# Entrypoint of docker/Dockerfile: writes $ZOO_CONF_DIR/zoo.cfg and the server id from the official
# `zookeeper` image's variables (unless a zoo.cfg is mounted), then runs the server in the foreground
# as the container's main process, so `docker stop`/`kill`/`pause` act on the JVM itself.
set -eu

CONFIG="$ZOO_CONF_DIR/zoo.cfg"
if [ ! -f "$CONFIG" ]; then
    {
        echo "dataDir=$ZOO_DATA_DIR"
        echo "dataLogDir=$ZOO_DATA_LOG_DIR"
        echo "tickTime=$ZOO_TICK_TIME"
        echo "initLimit=$ZOO_INIT_LIMIT"
        echo "syncLimit=$ZOO_SYNC_LIMIT"
        echo "autopurge.snapRetainCount=$ZOO_AUTOPURGE_SNAPRETAINCOUNT"
        echo "autopurge.purgeInterval=$ZOO_AUTOPURGE_PURGEINTERVAL"
        echo "maxClientCnxns=$ZOO_MAX_CLIENT_CNXNS"
        echo "standaloneEnabled=$ZOO_STANDALONE_ENABLED"
        echo "admin.enableServer=$ZOO_ADMINSERVER_ENABLED"
        if [ -z "${ZOO_SERVERS:-}" ]; then
            echo "server.1=localhost:2888:3888;2181"
        else
            for server in $ZOO_SERVERS; do echo "$server"; done
        fi
        if [ -n "${ZOO_4LW_COMMANDS_WHITELIST:-}" ]; then
            echo "4lw.commands.whitelist=$ZOO_4LW_COMMANDS_WHITELIST"
        fi
        # space-separated zoo.cfg lines the image has no variable for
        for entry in ${ZOO_CFG_EXTRA:-}; do echo "$entry"; done
    } > "$CONFIG"
fi
if [ ! -f "$ZOO_DATA_DIR/myid" ]; then
    echo "${ZOO_MY_ID:-1}" > "$ZOO_DATA_DIR/myid"
fi

if [ "$#" -eq 2 ] && [ "$1" = zkServer.sh ] && [ "$2" = start-foreground ]; then
    # what the official image's command does, with Debian's jars; log4j logs to stdout (docker logs)
    # shellcheck disable=SC2086  # JVMFLAGS holds several flags
    exec java ${JVMFLAGS:-} ${SERVER_JVMFLAGS:-} \
        -Dzookeeper.log.dir="$ZOO_LOG_DIR" -Dzookeeper.root.logger=INFO,CONSOLE \
        -cp "/etc/zookeeper/conf:/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-log4j12.jar:/usr/share/java/log4j-1.2.jar" \
        org.apache.zookeeper.server.quorum.QuorumPeerMain "$CONFIG"
fi
exec "$@"
