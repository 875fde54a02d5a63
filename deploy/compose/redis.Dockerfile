# redis.Dockerfile - Redis 7 from Debian 12's redis-server package, with an
# append-only file (fsync every second), for the compose stack.
FROM debian:12-slim

RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends redis-server \
 && rm -rf /var/lib/apt/lists/* \
 && install -d -o redis -g redis -m 0750 /data

USER redis
WORKDIR /data
VOLUME /data
EXPOSE 6379
# No config file: everything on the command line. AOF with everysec loses at
# most about a second of writes on a crash; no RDB snapshots besides the AOF's
# base. Protected mode is off because the server is reachable only on the
# compose network and has no password; for ACL users see deploy/redis/users.acl.
# A crash can cut the AOF inside a MULTI/EXEC block, which Redis 7.0 left to
# itself repairs only in part (README, "Redis with AOF after a crash"): so
# aof-load-truncated no, and before each start an AOF that redis-check-aof
# finds damaged is copied aside (appendonlydir.<time>) and repaired with --fix.
CMD ["sh", "-c", "m=/data/appendonlydir/appendonly.aof.manifest; \
if [ -f \"$m\" ] && ! redis-check-aof \"$m\" >/dev/null 2>&1; then \
  b=/data/appendonlydir.$(date +%s); cp -a /data/appendonlydir \"$b\" && \
  echo \"AOF damaged: a copy is in $b; redis-check-aof --fix:\" && \
  echo y | redis-check-aof --fix \"$m\" | tail -n 3; \
fi; \
exec redis-server --port 6379 --bind 0.0.0.0 --protected-mode no --dir /data \
  --appendonly yes --appendfsync everysec --aof-load-truncated no --save ''"]
