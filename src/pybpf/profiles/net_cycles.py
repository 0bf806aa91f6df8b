"""The network paths' CPU work ([net] in every profile), in cycles: the XDP / cpumap / GRO
receive path, TCP over loopback and the sockmap psock path.

User space cannot time these kernel functions, so ``pybpf calibrate`` (the host profile) and
tools/derive_server_profiles.py (the server profiles) give each as the estimate below at the
profile's clock, with what it counts as its source. Memory stalls (ring slots, frames, skb
heads, the socket) are charged separately by the timing model.
"""

from __future__ import annotations

# Estimated from what the kernel functions do (about one instruction a cycle for branchy
# kernel code). Written before any cpumap result was modeled, and never from the GRO series'
# published figures (the held-out check).
NET_CYCLES: dict[str, tuple[int, str]] = {
    "xdp_do_redirect": (60, "xdp_do_redirect, xdp_convert_buff_to_frame (a 40-byte struct "
                        "filled) and bq_enqueue: about 60 instructions"),
    "ptr_ring_produce": (10, "__ptr_ring_produce: a slot check and a store, about 10 "
                         "instructions"),
    "cpu_map_kthread_frame": (30, "__ptr_ring_consume_batched's per-entry step, the frame's "
                              "prefetchw and the kthread loop's per-frame bookkeeping: about "
                              "30 instructions"),
    "napi_skb_cache_get": (4, "an array pop and a pointer store per head"),
    "napi_skb_cache_put": (4, "an array push per head (skb_release_head_state is in "
                           "gro_merge)"),
    "kmem_cache_alloc_bulk": (10, "half of the ~19-20 cycles per object Jesper Dangaard "
                              "Brouer measured for SLUB bulk alloc + free in bulks of 16 "
                              "(slab bulk-API series, Linux 4.3-4.4, 2015)"),
    "kmem_cache_free_bulk": (10, "half of the ~19-20 cycles per object Jesper Dangaard Brouer "
                             "measured for SLUB bulk alloc + free in bulks of 16 (slab "
                             "bulk-API series, Linux 4.3-4.4, 2015)"),
    "build_skb": (120, "__xdp_build_skb_from_frame: build_skb_around (the 192-byte head "
                  "memset, the shared info), skb_reserve/put, the metadata, eth_type_trans "
                  "and the rx queue: about 120 instructions"),
    "gro_receive": (200, "dev_gro_receive (gro_list_prepare, the hash list), inet_gro_receive "
                    "(the IP header checks and checksum), udp4_gro_receive (software "
                    "checksum validation: cpumap skbs carry no hardware checksum) with its "
                    "per-skb socket lookup (udp4_lib_lookup_skb), udp_gro_receive_segment: "
                    "about 200 instructions"),
    "gro_receive_skb": (35, "gro_receive_skb's (napi_gro_receive's) entry and exit, paid by "
                        "every skb a GRO node takes: __skb_mark_napi_id, the napi_gro_receive "
                        "entry/exit tracepoints (static keys off), skb_gro_reset_offset, "
                        "dev_gro_receive's netif_elide_gro test and its exit "
                        "(gro_try_pull_from_frag0's test, the bucket bitmask update) and "
                        "gro_skb_finish's switch: about 35 instructions (net/core/gro.c; the "
                        "GRO work itself, when the device does not elide it, is gro_receive)"),
    "gro_normal_one": (10, "gro_normal_one per skb put on the GRO node's rx_list: "
                       "list_add_tail, rx_count and the test against gro_normal_batch: about "
                       "10 instructions (include/net/gro.h)"),
    "gro_flush": (15, "a GRO node's flush (cpu_map_gro_flush every 64 frames or on an "
                  "empty ring, napi_complete_done's): gro_flush's test of the held-list "
                  "bitmask and gro_normal_list's test of rx_count, the calls: about 15 "
                  "instructions (completing held skbs is gro_complete's, the stack "
                  "netif_receive_skb's)"),
    "gro_merge": (60, "skb_gro_receive's frag append (page reference, frag descriptor, "
                  "lengths and truesize) and napi_skb_free_stolen_head: about 60 "
                  "instructions"),
    "gro_complete": (80, "napi_gro_complete, inet_gro_complete, udp4_gro_complete (lengths, "
                     "pseudo-header checksum, gso fields): about 80 instructions"),
    "netif_receive_skb": (800, "netif_receive_skb_list_internal and __netif_receive_skb_core "
                          "(the ptype walk), ip_list_rcv (header checks), ip_route_input_noref "
                          "(a FIB lookup) or UDP early demux, ip_local_deliver, __udp4_lib_rcv "
                          "(the software checksum, the socket lookup), "
                          "__udp_enqueue_schedule_skb (rmem accounting, the queue lock) and "
                          "sock_def_readable's wake-up of the reader: about 800 instructions"),
    # TCP over loopback and the sockmap psock path: written before any sockmap figure was
    # modeled, never from the affinity patch's published figures (the held-out check).
    "copy_user_line": (10, "rep movsb of 64 bytes at about 6 bytes a cycle: source or "
                       "destination lines come from the other CPU's cache or the LLC, since "
                       "loopback's page frags move between the sender's and the reader's "
                       "CPUs"),
    "tcp_sendmsg_skb": (600, "tcp_sendmsg_locked per skb: tcp_stream_alloc_skb, "
                        "sk_wmem_schedule, the page frag refill, tcp_skb_entail, the size "
                        "goal and the push decision: about 600 instructions"),
    "skb_send_sock_frag": (400, "__skb_send_sock per frag: sock_sendmsg, lock_sock, "
                           "tcp_sendmsg_locked with MSG_SPLICE_PAGES (skb_splice_from_iter: "
                           "a page reference and a frag descriptor), release_sock: about 400 "
                           "instructions"),
    "tcp_write_xmit_skb": (1000, "tcp_write_xmit, tcp_transmit_skb (the clone, the header "
                           "and options), ip_queue_xmit on a cached route, ip_finish_output2, "
                           "neigh_output, __dev_queue_xmit without a qdisc, loopback_xmit and "
                           "__netif_rx onto the backlog: about 1000 instructions"),
    "tcp_v4_rcv_skb": (1500, "net_rx_action and process_backlog, __netif_receive_skb_core, "
                       "ip_rcv and ip_local_deliver, tcp_v4_rcv (the socket lookup, the "
                       "socket lock), tcp_rcv_established (the fast path, tcp_event_data_recv"
                       "), tcp_queue_rcv with rmem accounting and sk_data_ready's wake-up: "
                       "about 1500 instructions"),
    "tcp_ack": (1200, "tcp_cleanup_rbuf -> tcp_send_ack (a header-only skb built and sent "
                "through ip_output and loopback) and its receive: tcp_v4_rcv, tcp_ack "
                "cleaning the acked skb off the retransmit queue and freeing it: about 1200 "
                "instructions"),
    "tcp_recvmsg_skb": (500, "tcp_recvmsg_locked per skb: the receive queue walk, "
                        "tcp_rcv_space_adjust, skb_consume (the head, the page puts) and the "
                        "rmem uncharge: about 500 instructions"),
    "tcp_read_skb": (300, "tcp_read_skb per skb: __skb_unlink, WRITE_ONCE(copied_seq), "
                     "tcp_eat_recv_skb's ownership transfer and the sk_psock lookup of "
                     "sk_psock_verdict_recv: about 300 instructions"),
    "sk_psock_skb_redirect": (300, "skb_bpf_redirect_fetch, sk_psock(sk_other), the "
                              "TX_ENABLED check, skb_queue_tail under its lock, "
                              "schedule_delayed_work (queue_work_on: the pending bit, the "
                              "pool's worklist) and wake_up_process of the idle kworker: about "
                              "300 instructions"),
    "kworker_wakeup": (2500, "two context switches (__schedule into the kworker and out when "
                       "it sleeps again: about 1000 cycles each with the mitigations) and "
                       "worker_thread/process_one_work with the work_mutex of "
                       "sk_psock_backlog: about 500"),
    "sk_psock_ingress_msg": (400, "sk_psock_skb_ingress: an sk_msg allocated, skb_to_sgvec, "
                             "the ingress_msg queueing under its lock and sk_data_ready: "
                             "about 400 instructions"),
}


def net_source(cycles: int, ghz: float, what: str) -> str:
    """The source of a [net] value: its cycle estimate at the profile's clock."""
    return f"estimate: {cycles} cycles at {ghz:.2f} GHz: {what}"
