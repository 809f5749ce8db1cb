/* agglab build-time constants.
 *
 * This file is the ONE place the aggregation packet geometry is defined.
 * P4 includes it; Python (agglab/wire.py) parses the #define lines, so the
 * scapy layer, the host agents and the software switch read the same numbers.
 * A scheme's own defines (its agg_h flag, its counters' indices) live in its own
 * include (atp.p4), read alike: a scheme added is its own file, not a line here.
 * After changing AGG_K or AGG_K_WIDE run `make p4gen` to regenerate include/values.p4.
 * A program variant is chosen at build time: p4c -DAGG_K=<AGG_K or AGG_K_WIDE>,
 * and AGGLAB_K=<same> in the environment of every agglab process (ground/wire.py).
 */
#ifndef AGGLAB_CONSTANTS_P4
#define AGGLAB_CONSTANTS_P4

#ifndef AGG_K                        /* p4c -DAGG_K=256 builds the wide variant */
#define AGG_K            64          /* int32 values per aggregation packet   */
#endif
#define AGG_K_WIDE       256         /* the second program variant's AGG_K (as SwitchML's 256 with recirculation; 1082-byte frames) */
#define AGG_UDP_PORT     48879       /* UDP port of aggregation traffic       */
#define AGG_SLOTS        1024        /* slots per version in every switch     */
#define AGG_MAX_WORKERS  32          /* width of the contribution bitmap      */
#define AGG_STATS_SIZE   8           /* entries of the agg_stats counter      */
#define AGG_REJECTS_SIZE 8           /* entries of the agg_rejects counter    */
#define AGG_ANY_WORKER   0xFFFF      /* agg_job `worker` param: any worker field (a switch's port) */

#define AGG_FLAG_RESULT  1           /* packet carries an aggregate           */
#define AGG_FLAG_RETX    2           /* worker retransmission (informational) */
#define AGG_FLAG_SPARSE  4           /* sparse (OmniReduce) pipeline           */
#define AGG_FLAG_ACK     8           /* sparse: header-only acknowledgement    */
#define AGG_FLAG_LEAD    16          /* dense lead round of a sparse call: next_block/exp announce the sender's first sparse block */
#define AGG_NEXT_NONE    0xFFFFFFFF  /* next_block value meaning "no more"    */
#define AGG_EXP_BIAS     128         /* exp field = exponent + AGG_EXP_BIAS   */

/* agg_stats counter indices */
#define STAT_CONTRIB     0           /* first copies accepted                 */
#define STAT_COMPLETE    1           /* slot versions completed               */
#define STAT_DUP_DROP    2           /* duplicates before completion, dropped */
#define STAT_DUP_REPLY   3           /* duplicates after completion, answered */
#define STAT_REJECT      4           /* malformed or not in a job, dropped    */
#define STAT_SIM_DROP    5           /* dropped by the drop simulator         */
#define STAT_DUP_UP      6           /* partial re-sent to the parent (trees) */
#define STAT_SP_HOLD     7           /* sparse: new round held back or stale  */

/* agg_rejects counter indices: why a packet counted in STAT_REJECT was dropped
 * (every rejected packet counts once in STAT_REJECT and once here). */
#define REJ_MALFORMED    0           /* cut short: the parser ended in an error            */
#define REJ_LENGTH       1           /* IPv4/UDP length fields disagree with each other,
                                        the headers or the frame                           */
#define REJ_NO_ENTRY     2           /* no agg_job entry: another job's id, an old epoch,
                                        a port outside the job                             */
#define REJ_SLOT         3           /* slot outside the job's slot range                  */
#define REJ_WORKER       4           /* worker field is not the port's rank (spoofed)      */
#define REJ_FROM_PARENT  5           /* not a result, on the parent port                   */
#define REJ_ENTRY        6           /* the entry's child index does not fit the bitmap    */
#define REJ_POLICED      7           /* from a port in no job, over its meter (policer.p4)  */

#endif
