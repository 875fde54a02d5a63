# postgres.Dockerfile - PostgreSQL 15 + wal2json from Debian 12's own packages,
# for the compose stack (compose.yaml). Build context: the repository root.
# A development database: logical decoding on, the outbox schema
# (sql/outbox.sql) and the relay's role (sql/roles.sql) loaded on first start.
FROM debian:12

# No automatic "main" cluster: the entrypoint runs initdb itself in the volume.
RUN mkdir -p /etc/postgresql-common/createcluster.d \
 && echo 'create_main_cluster = false' >/etc/postgresql-common/createcluster.d/no-main-cluster.conf \
 && apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        postgresql-15 postgresql-15-wal2json \
 && rm -rf /var/lib/apt/lists/* \
 && install -d -o postgres -g postgres -m 2775 /var/run/postgresql \
 && install -d -o postgres -g postgres -m 0700 /var/lib/postgresql/data

COPY sql/outbox.sql sql/roles.sql /docker-entrypoint-initdb.d/
COPY deploy/compose/postgres-entrypoint.sh /usr/local/bin/postgres-entrypoint.sh

ENV PGDATA=/var/lib/postgresql/data \
    PATH=/usr/lib/postgresql/15/bin:$PATH
USER postgres
VOLUME /var/lib/postgresql/data
EXPOSE 5432
# Fast shutdown (SIGINT): disconnect clients, checkpoint, exit.
STOPSIGNAL SIGINT
ENTRYPOINT ["/usr/local/bin/postgres-entrypoint.sh"]
