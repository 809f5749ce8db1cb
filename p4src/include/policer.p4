/* The port policer (docs/design/tenants.md "Tenants": ports in no job).
 *
 * Why: a port that leads to a host in no job has no agg_job entry, so every
 * aggregation frame from it is rejected, but each still costs the switch a
 * parse and a lookup; a flood from such a host took the switch's time from
 * the jobs.  The controller puts those ports into port_policer; every frame
 * from one first runs the port's meter (port_meter, indexed by port number,
 * rates set with meter_set_rates), and a red frame is dropped before
 * anything else looks at it, counted as a reject (REJ_POLICED).  Yellow
 * frames pass: only the peak rate is enforced.  softswitch/policer.py is the
 * software switch's twin.
 */
#ifndef AGGLAB_POLICER_P4
#define AGGLAB_POLICER_P4

#define AGG_METER_PORTS 512
#define METER_RED 2                   /* V1MODEL_METER_COLOR_RED */

meter(AGG_METER_PORTS, MeterType.packets) port_meter;

control PortPolicer(inout headers_t hdr, inout meta_t meta,
                    inout standard_metadata_t standard_metadata) {
    @name(".police")
    action police() {
        port_meter.execute_meter((bit<32>)standard_metadata.ingress_port, meta.color);
    }

    @name(".port_policer")
    table port_policer {
        key = { standard_metadata.ingress_port: exact; }
        actions = { police; NoAction; }
        default_action = NoAction();
        size = AGG_METER_PORTS;
    }

    apply {
        meta.color = 0;
        meta.policed = 0;
        port_policer.apply();
        if (meta.color == METER_RED) {
            mark_to_drop(standard_metadata);
            agg_stats.count(STAT_REJECT);
            agg_rejects.count(REJ_POLICED);
            meta.policed = 1;
        }
    }
}

#endif
