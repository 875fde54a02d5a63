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
CMD ["redis-server", "--port", "6379", "--bind", "0.0.0.0", "--protected-mode", "no", \
     "--dir", "/data", "--appendonly", "yes", "--appendfsync", "everysec", "--save", ""]
