"""The XDP / cpumap / GRO receive path's CPU work ([net] in every profile), in cycles.

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
}


def net_source(cycles: int, ghz: float, what: str) -> str:
    """The source of a [net] value: its cycle estimate at the profile's clock."""
    return f"estimate: {cycles} cycles at {ghz:.2f} GHz: {what}"
