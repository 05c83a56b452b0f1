// Simulation-only hardware of the fast system harness (sim/system/simhw.py):
// per NIC a host memory behind an AXI4 slave, and per MAC port the MAC
// streams between the NICs and the Python fabric, at frame granularity. The
// stream functions take a port, NIC + NICS x plane (plane 0's port is the
// NIC's index); the memory functions a NIC.
//
// Two sides, one shared library (libmrcsimhw.so):
// - DPI-C functions, called by the Verilog of sim/system/simhw.py every clock
//   cycle in which a beat moves (mrc_mem_read/write, mrc_tx_beat, mrc_rx_beat);
// - a C API that Python reaches with ctypes (the same library, loaded once by
//   the simulator): backdoor access to the memories, whole frames out of
//   mac_tx and into mac_rx, and the error counts the harness checks.
// Nothing here decides a frame's fate: the fabric stays in Python.

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <queue>
#include <vector>

namespace {

constexpr int NICS = 8;  // sim/system/top.py MAX_NICS
constexpr int PORTS = NICS * 8;  // a MAC port per NIC and plane (up to 8 planes)

struct Beat {  // a write beat held until its burst's last beat
    uint64_t base;
    uint64_t data;
    int strb;
};

struct Memory {
    std::vector<uint8_t> bytes;
    std::vector<Beat> burst;   // the write burst in progress
    int64_t drop_in = -1;      // test hook: the write beat that loses ``drop_lanes``
    int drop_lanes = 0;
    uint64_t errors = 0;       // accesses outside the memory, or a burst type other than INCR
    uint64_t first_error = 0;  // the address of the first (for the message)
};

struct TxStream {  // a NIC's mac_tx: beats in, whole frames out to Python
    std::vector<uint8_t> partial;
    std::deque<std::vector<uint8_t>> frames;
    // Paced (ns_per_byte > 0): the MAC sends what it takes at the wire's rate
    // and takes a beat only while what it holds leaves within fifo_ns; each
    // frame's departure (its last bit on the wire) goes out with it.
    std::deque<double> departs;
    double ns_per_byte = 0, overhead = 0, fifo_ns = 0;
    double wire_free = 0;  // ns: when the wire has sent every byte taken
};

struct Pending {  // a frame on its way: due at ``at`` ns, ties in the order queued
    uint64_t at, seq;
    std::vector<uint8_t> bytes;
    bool operator>(const Pending& o) const { return at != o.at ? at > o.at : seq > o.seq; }
};

struct RxStream {  // a NIC's mac_rx: whole frames in from Python, beats out
    std::priority_queue<Pending, std::vector<Pending>, std::greater<Pending>> pending;
    uint64_t seq = 0;
    std::deque<std::vector<uint8_t>> frames;  // due: on the stream in this order
    size_t offset = 0;  // bytes of frames.front() already on the stream
};

Memory mem[NICS];
TxStream tx[PORTS];
RxStream rx[PORTS];

bool in_range(const Memory& m, uint64_t addr, uint64_t n) {
    return addr < m.bytes.size() && n <= m.bytes.size() - addr;
}

void mem_error(Memory& m, uint64_t addr) {
    if (m.errors++ == 0) m.first_error = addr;
}

}  // namespace

extern "C" {

// ---- C API for Python (ctypes) ----------------------------------------------------------

// Size (and clear) the memories of NICs 0 .. nics - 1 (the others: none) and
// drop every queued frame: a fresh system. Returns NICS.
int mrc_sim_reset(uint64_t mem_bytes, int nics) {
    for (int i = 0; i < NICS; i++) {
        mem[i].bytes.assign(i < nics ? mem_bytes : 0, 0);
        mem[i].errors = mem[i].first_error = 0;
        mem[i].burst.clear();
        mem[i].drop_in = -1;
    }
    for (int p = 0; p < PORTS; p++) {
        tx[p] = TxStream();
        rx[p] = RxStream();
    }
    return NICS;
}

uint8_t* mrc_mem_ptr(int nic) { return mem[nic].bytes.data(); }

// A broken DMA, for tests that the checks catch one: the NIC's write beat
// ``beats`` beats from now (0: the next) loses its byte lanes ``lanes``.
void mrc_mem_drop_lanes(int nic, uint64_t beats, int lanes) {
    mem[nic].drop_in = (int64_t)beats;
    mem[nic].drop_lanes = lanes;
}
uint64_t mrc_mem_errors(int nic) { return mem[nic].errors; }
uint64_t mrc_mem_first_error(int nic) { return mem[nic].first_error; }

// Length of the oldest whole frame sent on MAC port ``port``, or -1 if there is none.
int mrc_tx_peek(int port) {
    return tx[port].frames.empty() ? -1 : (int)tx[port].frames.front().size();
}

// Copy the oldest frame into ``buf`` (mrc_tx_peek bytes) and drop it.
int mrc_tx_pop(int port, uint8_t* buf) {
    if (tx[port].frames.empty()) return -1;
    auto& f = tx[port].frames.front();
    int n = (int)f.size();
    std::memcpy(buf, f.data(), f.size());
    tx[port].frames.pop_front();
    tx[port].departs.pop_front();
    return n;
}

// MAC port ``port``'s mac_tx paced at ``ns_per_byte`` per byte (0: a beat every
// cycle, no wire), ``overhead`` bytes per frame more on the wire (FCS,
// preamble, gap), holding at most ``fifo_ns`` of wire time.
void mrc_tx_pace(int port, double ns_per_byte, int overhead, double fifo_ns) {
    TxStream& s = tx[port];
    s.ns_per_byte = ns_per_byte;
    s.overhead = overhead;
    s.fifo_ns = fifo_ns;
}

// When the oldest whole frame of ``port`` leaves the wire (ns), or -1 (not paced).
double mrc_tx_departure(int port) {
    return tx[port].departs.empty() ? -1.0 : tx[port].departs.front();
}

// Queue a frame for MAC port ``port``'s mac_rx, due at simulated time ``at_ns``:
// it goes on the stream at the first clock edge at or after then, behind the
// frames due before it (and those due at the same time but queued before it).
void mrc_rx_push(int port, const uint8_t* buf, int len, uint64_t at_ns) {
    RxStream& s = rx[port];
    s.pending.push(Pending{at_ns, s.seq++, std::vector<uint8_t>(buf, buf + len)});
}

int mrc_rx_queued(int port) { return (int)(rx[port].frames.size() + rx[port].pending.size()); }

// ---- DPI-C, called from the Verilog -----------------------------------------------------

// The aligned 64-bit word holding ``addr`` (little endian); 0 outside the memory.
int64_t mrc_mem_read(int nic, int64_t addr) {
    Memory& m = mem[nic];
    uint64_t base = (uint64_t)addr & ~uint64_t(7);
    if (!in_range(m, base, 8)) {
        mem_error(m, (uint64_t)addr);
        return 0;
    }
    uint64_t v;
    std::memcpy(&v, &m.bytes[base], 8);
    return (int64_t)v;
}

// One beat of a write burst: the byte lanes of ``strb`` of the aligned word
// holding ``addr``. The burst's beats reach the memory together at its last
// beat (``last``), as a PCIe write of the burst lands whole in host memory:
// the host (a backdoor read) never sees part of a burst, e.g. a CQE whose
// phase byte is written and whose last beat is not.
void mrc_mem_write(int nic, int64_t addr, int64_t data, int strb, int last) {
    Memory& m = mem[nic];
    uint64_t base = (uint64_t)addr & ~uint64_t(7);
    if (m.drop_in >= 0 && m.drop_in-- == 0) strb &= ~m.drop_lanes;
    if (strb == 0) {
        // a word of a wide beat with no byte to write
    } else if (!in_range(m, base, 8))
        mem_error(m, (uint64_t)addr);
    else
        m.burst.push_back(Beat{base, (uint64_t)data, strb});
    if (!last) return;
    for (const Beat& w : m.burst)
        for (int b = 0; b < 8; b++)
            if (w.strb >> b & 1) m.bytes[w.base + b] = (uint8_t)(w.data >> (8 * b));
    m.burst.clear();
}

// A burst the memory does not serve as asked (not INCR, or WLAST on the
// wrong beat); the Verilog raises the NIC's mem_error port too.
void mrc_mem_protocol_error(int nic, int64_t addr) { mem_error(mem[nic], (uint64_t)addr); }

// The memory's error count, for the Verilog's sticky mem_error port.
int mrc_mem_failed(int nic) { return mem[nic].errors != 0; }

// One beat put on MAC port ``port``'s mac_tx at ``now_ns``; ``last`` ends the frame.
void mrc_tx_beat(int port, int64_t data, int keep, int last, int64_t now_ns) {
    TxStream& s = tx[port];
    int n = 0;
    for (int b = 0; b < 8; b++)
        if (keep >> b & 1) {
            s.partial.push_back((uint8_t)((uint64_t)data >> (8 * b)));
            n++;
        }
    bool paced = s.ns_per_byte > 0;
    if (paced)
        s.wire_free = std::max(s.wire_free, (double)now_ns) + n * s.ns_per_byte;
    if (last) {
        if (paced) s.wire_free += s.overhead * s.ns_per_byte;
        s.frames.emplace_back(std::move(s.partial));
        s.departs.push_back(paced ? s.wire_free : -1.0);
        s.partial.clear();
    }
}

// Whether MAC port ``port``'s mac_tx takes a beat in the cycle after ``now_ns``.
int mrc_tx_ready(int port, int64_t now_ns) {
    const TxStream& s = tx[port];
    return s.ns_per_byte <= 0 || s.wire_free <= (double)now_ns + s.fifo_ns;
}

// The next 8 bytes for MAC port ``port``'s mac_rx at simulated time ``now_ns``:
// returns 1 and fills ``data`` and ``keep_last`` (tkeep in bits 7..0, tlast in
// bit 8), or 0 when no frame is due. ``more``: the next 8 bytes of the same
// beat (a bus wider than 64 bits), so only of a frame already begun (else 0).
int mrc_rx_beat(int port, int64_t now_ns, int more, int64_t* data, int* keep_last) {
    RxStream& s = rx[port];
    if (more && s.offset == 0) return 0;
    while (!s.pending.empty() && s.pending.top().at <= (uint64_t)now_ns) {
        s.frames.push_back(std::move(const_cast<Pending&>(s.pending.top()).bytes));
        s.pending.pop();
    }
    if (s.frames.empty()) return 0;
    const auto& f = s.frames.front();
    size_t n = f.size() - s.offset;
    if (n > 8) n = 8;
    uint64_t v = 0;
    for (size_t b = 0; b < n; b++) v |= (uint64_t)f[s.offset + b] << (8 * b);
    s.offset += n;
    bool last = s.offset >= f.size();
    *data = (int64_t)v;
    *keep_last = (int)((1u << n) - 1) | (last ? 0x100 : 0);
    if (last) {
        s.frames.pop_front();
        s.offset = 0;
    }
    return 1;
}

}  // extern "C"
