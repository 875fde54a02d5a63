#!/bin/bash
# 66_example_python: deploy/examples/python/consumer.py, the Python consumer
# example (redis-py + psycopg2, Debian's), against the relay's streams: the
# scenario of example_consumer.sh (also run by 57_example_node).
#   (a) exactly once in effect across kill -9 (SIGKILLed twice, restarted
#       under its name, a second worker claims with XAUTOCLAIM): 300 effect
#       rows, one per event id, 0 pending, an effect repeated as a no-op;
#   (b) a poison event dead-lettered once after --max-deliveries 3 while
#       the rest flow;
#   (c) a second group "slow" that acked nothing keeps its entries through
#       the relay's --trim acked; a lost PostgreSQL connection is retried.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/example_consumer.sh"

CONSUMER=$TESTS_DIR/../deploy/examples/python/consumer.py
example_tooling_check # the worker is $PY too
setup_tmp
WORKER=("$PY" "$CONSUMER")
example_consumer_scenario
