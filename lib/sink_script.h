/*
 * sink_script.h - the Lua source of the relay's Redis function library and
 * its EVAL fallback (lib/sink_script.c).
 */
#ifndef RELAY_SINK_SCRIPT_H
#define RELAY_SINK_SCRIPT_H

#define SINK_SCRIPT_PUBLISH "outbox_relay_publish" /* the publish function's name */
#define SINK_SCRIPT_TRIM "outbox_relay_trim"       /* the --trim acked function's name */

/* FUNCTION LOAD body: the library "outbox_relay" with both functions. */
extern const char sink_script_library[];
/* EVAL/SCRIPT LOAD bodies for servers without functions (before 7.0). */
extern const char sink_script_eval_publish[];
extern const char sink_script_eval_trim[];

#endif
