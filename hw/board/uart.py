"""UART to AXI4-Lite bridge: the host's register access to the board.

``UARTToAXI4Lite`` receives framed requests on a UART (8 data bits, no
parity, 1 stop bit, LSB first), performs one AXI4-Lite read or write as
master, and answers every request with one fixed-size response. The framing
(docs/board.md has the full description, host_driver/uart_transport.py the
host side)::

    read request    'R' (0x52)  addr[31:24] addr[23:16] addr[15:8] addr[7:0]  csum
    write request   'W' (0x57)  addr (4 bytes, MSB first)  data (4 bytes, MSB first)  csum
    response        status  data[31:24] data[23:16] data[15:8] data[7:0]  csum

``csum`` makes the byte sum of the frame 0 modulo 256. ``status`` is the AXI
response (0 OKAY, 2 SLVERR, 3 DECERR) of a completed access, or one of
``STATUS_BAD_CHECKSUM``, ``STATUS_BAD_COMMAND``, ``STATUS_FRAMING``,
``STATUS_TIMEOUT`` when the request was not executed; ``data`` is the read
data (0 for writes and errors).

Errors and resynchronisation: a bad checksum is answered at once. A byte
that is not a command, or a UART framing error (stop bit low, a break), puts
the bridge in a discard state: it swallows bytes until the line has been
quiet for ``timeout`` bit times, then answers once. A request that stops
half way is answered with ``STATUS_TIMEOUT`` after the same quiet time. So
after any error the host waits for one response and both sides are in step.
One request at a time: bytes that arrive while an access or a response is
in progress are ignored.

Latency: the response's first start bit leaves 3 cycles after the AXI
response (B or R handshake) of the access, which starts 4 cycles after the
request's checksum byte's stop bit is sampled (each received byte is
registered once more, with its command decode, and the checksum test, the
response code and the response's checksum byte each take a registered
step). Throughput: one access
per request/response pair, 16 (read) or 20 (write) bytes on the line.
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.cdc import FFSynchronizer
from amaranth.lib.wiring import In, Out

from ..axi import AXI4LiteSignature
from ..pipeline import OneHotFSM

__all__ = [
    "CMD_READ",
    "CMD_WRITE",
    "STATUS_BAD_CHECKSUM",
    "STATUS_BAD_COMMAND",
    "STATUS_FRAMING",
    "STATUS_TIMEOUT",
    "UARTRx",
    "UARTToAXI4Lite",
    "UARTTx",
]

CMD_READ = 0x52  # 'R'
CMD_WRITE = 0x57  # 'W'
STATUS_BAD_CHECKSUM = 0x80
STATUS_BAD_COMMAND = 0x81
STATUS_FRAMING = 0x82
STATUS_TIMEOUT = 0x83
RESPONSE_BYTES = 6


class UARTRx(wiring.Component):
    """UART receiver, 8N1, ``divisor`` clock cycles per bit (at least 4).

    Interface: ``rx`` (the line, synchronised here), ``o`` (stream of bytes;
    no backpressure: a byte not taken in the cycle it is valid is gone),
    ``framing_error`` (one cycle when a stop bit is low; the receiver then
    waits for the line to go high, so a break gives one error), ``active``
    (high from a start bit to its stop bit, for idle timers).
    A start bit is a falling edge still low at the middle of the bit; each
    bit is sampled at its middle.
    Latency: the byte is valid 1 cycle after the middle of its stop bit.
    Throughput: one byte per 10 bit times.
    """

    rx: In(1)
    o: Out(stream.Signature(8))
    framing_error: Out(1)
    active: Out(1)

    def __init__(self, divisor: int):
        if divisor < 4:
            raise ValueError(f"UART divisor must be at least 4 clock cycles per bit, not {divisor}")
        self.divisor = divisor
        super().__init__()

    def elaborate(self, platform):
        m = Module()
        line = Signal(init=1)
        m.submodules.rx_sync = FFSynchronizer(self.rx, line, init=1)
        timer = Signal(range(self.divisor))
        bit = Signal(range(10))
        shreg = Signal(8)

        m.d.sync += [self.o.valid.eq(0), self.framing_error.eq(0)]
        with m.FSM():
            with m.State("IDLE"):
                with m.If(~line):
                    m.d.sync += timer.eq(self.divisor // 2 - 1)
                    m.next = "START"
            with m.State("START"):
                m.d.comb += self.active.eq(1)
                with m.If(timer != 0):
                    m.d.sync += timer.eq(timer - 1)
                with m.Elif(line):  # a glitch, not a start bit
                    m.next = "IDLE"
                with m.Else():
                    m.d.sync += [timer.eq(self.divisor - 1), bit.eq(0)]
                    m.next = "DATA"
            with m.State("DATA"):
                m.d.comb += self.active.eq(1)
                with m.If(timer != 0):
                    m.d.sync += timer.eq(timer - 1)
                with m.Else():
                    m.d.sync += [timer.eq(self.divisor - 1), bit.eq(bit + 1)]
                    with m.If(bit == 8):  # the stop bit
                        with m.If(line):
                            m.d.sync += [self.o.payload.eq(shreg), self.o.valid.eq(1)]
                            m.next = "IDLE"
                        with m.Else():
                            m.d.sync += self.framing_error.eq(1)
                            m.next = "BREAK"
                    with m.Else():
                        m.d.sync += shreg.eq(Cat(shreg[1:], line))
            with m.State("BREAK"):
                with m.If(line):
                    m.next = "IDLE"
        return m


class UARTTx(wiring.Component):
    """UART transmitter, 8N1, ``divisor`` clock cycles per bit.

    Interface: ``i`` (stream of bytes), ``tx`` (the line, registered).
    Latency: the start bit begins 1 cycle after the byte is taken.
    Throughput: one byte per 10 bit times plus 1 cycle, back to back.
    """

    i: In(stream.Signature(8))
    tx: Out(1, init=1)

    def __init__(self, divisor: int):
        self.divisor = divisor
        super().__init__()

    def elaborate(self, platform):
        m = Module()
        timer = Signal(range(self.divisor))
        frame = Signal(10)  # stop, data[7:0], start; shifted out LSB first
        bits_left = Signal(range(11))

        # ``idle``: the stop bit has had its full time (timer and bits_left
        # are 0), kept in a register so that i.ready comes from a flip-flop.
        idle = Signal(init=1)
        m.d.comb += self.i.ready.eq(idle)
        with m.If(timer != 0):
            m.d.sync += [timer.eq(timer - 1), idle.eq((timer == 1) & (bits_left == 0))]
        with m.Elif(bits_left != 0):
            m.d.sync += [
                self.tx.eq(frame[0]),
                frame.eq(frame >> 1),
                timer.eq(self.divisor - 1),
                bits_left.eq(bits_left - 1),
                idle.eq((bits_left == 1) & (self.divisor == 1)),
            ]
        with m.Elif(self.i.valid):
            # Idle: the line stays high until a byte comes.
            m.d.sync += [
                frame.eq(Cat(Const(0, 1), self.i.payload, Const(1, 1))),
                bits_left.eq(10),
                idle.eq(0),
            ]
        return m


class UARTToAXI4Lite(wiring.Component):
    """UART request/response bridge, AXI4-Lite master (see the module docstring).

    Interface: ``rx`` (UART line in), ``tx`` (UART line out, idle high),
    ``m_axil`` (AXI4-Lite master, 32-bit data, ``addr_width`` address bits;
    the request's address is truncated to them).
    Parameters: ``divisor`` clock cycles per bit (clock / baud rate, at
    least 4); ``timeout`` quiet bit times that end a discarded or unfinished
    request (40, four byte times, by default).
    AXI: AR or AW and W are raised together and each held until its ready;
    RREADY/BREADY are high while waiting for the response. ``wstrb`` is
    0xF, ``awprot``/``arprot`` are 0. There is no timeout on the AXI side: a
    slave that never answers stalls the bridge.
    """

    def __init__(self, divisor: int, *, addr_width: int = 32, timeout: int = 40):
        if not 1 <= addr_width <= 32:
            raise ValueError(f"addr_width must be 1..32, not {addr_width}")
        self.divisor, self.addr_width, self.timeout = divisor, addr_width, timeout
        super().__init__(
            {
                "rx": In(1, init=1),
                "tx": Out(1, init=1),
                "m_axil": Out(AXI4LiteSignature(addr_width, 32)),
            }
        )

    def elaborate(self, platform):
        m = Module()
        m.submodules.uart_rx = urx = UARTRx(self.divisor)
        m.submodules.uart_tx = utx = UARTTx(self.divisor)
        m.d.comb += [urx.rx.eq(self.rx), self.tx.eq(utx.tx)]
        axil = self.m_axil

        # Quiet-line timer: restarts on every start bit and byte. ``timed_out`` is a
        # flip-flop, set with the count's last step, not a compare in front of the FSM.
        quiet_cycles = self.timeout * self.divisor
        quiet = Signal(range(quiet_cycles + 1))
        timed_out = Signal(init=quiet_cycles == 0)
        with m.If(urx.active | urx.o.valid | urx.framing_error):
            m.d.sync += [quiet.eq(0), timed_out.eq(quiet_cycles == 0)]
        with m.Elif(~timed_out):
            m.d.sync += [quiet.eq(quiet + 1), timed_out.eq(quiet == quiet_cycles - 1)]

        request = Signal(9 * 8)  # the bytes after the command, first byte at the top
        is_write = Signal()
        left = Signal(range(10))  # bytes of the request still to come
        csum_due = Signal(8)  # the checksum byte that makes the frame sum 0 so far
        status = Signal(8)
        rdata = Signal(32)
        # AR, AW and W valid, from flip-flops: raised with the request's last
        # byte, each dropped with its ready.
        ar_pending, aw_pending, w_pending = Signal(), Signal(), Signal()
        response = Signal(RESPONSE_BYTES * 8)  # first byte at the top
        resp_left = Signal(range(RESPONSE_BYTES + 1))

        # The receiver's byte and framing error a cycle later, with the byte's
        # command decode registered beside them: the FSM's transitions are then
        # LUTs of flip-flops without a byte compare in front. The receiver's
        # payload register holds the byte until the next one (10 bit times).
        byte = urx.o.payload
        byte_valid, framing_error = Signal(), Signal()
        cmd_read, cmd_write = Signal(), Signal()
        m.d.sync += [byte_valid.eq(urx.o.valid), framing_error.eq(urx.framing_error),
                     cmd_read.eq(byte == CMD_READ), cmd_write.eq(byte == CMD_WRITE)]
        # Received bytes shift in at the bottom; a read leaves its 4 address
        # bytes in [39:8], a write its address in [71:40] and data in [39:8].
        addr = Mux(is_write, request[40:72], request[8:40])
        wdata = request[8:40]

        m.d.comb += [
            axil.araddr.eq(addr),
            axil.awaddr.eq(addr),
            axil.wdata.eq(wdata),
            axil.wstrb.eq(0xF),
            axil.arprot.eq(0),
            axil.awprot.eq(0),
            axil.arvalid.eq(ar_pending),
            axil.awvalid.eq(aw_pending),
            axil.wvalid.eq(w_pending),
        ]

        # The response's checksum byte, registered every cycle from status and rdata:
        # CSUM waits the cycle it takes after they are set, RESPOND loads it.
        body = Cat(rdata, status)  # status is the top (first) byte
        resp_csum = Signal(8)
        m.d.sync += resp_csum.eq(-sum(body.word_select(i, 8) for i in range(5)))

        # the interconnect's response code, every cycle (read in RESP, after
        # READ_DATA or WRITE_RESP took the response)
        resp_q = Signal(2)
        m.d.sync += resp_q.eq(Mux(is_write, axil.bresp, axil.rresp))

        # One flip-flop per state: each state's next value, and SEND's valid to
        # the transmitter, have no decode of a state register in front.
        # rdata: 0 from IDLE on (every error and every write answers 0), the R data
        # while READ_DATA waits for it; so its enable is two states' flip-flops.
        fsm = OneHotFSM(m, ("IDLE", "RECEIVE", "CHECK", "DISCARD", "READ_ADDR", "READ_DATA",
                            "WRITE", "WRITE_RESP", "RESP", "CSUM", "RESPOND", "SEND"),
                        init="IDLE", name="bridge_state")
        with fsm.State("IDLE"):
            m.d.sync += rdata.eq(0)
            with m.If(framing_error):
                m.d.sync += status.eq(STATUS_FRAMING)
                fsm.next = "DISCARD"
            with m.Elif(byte_valid):
                m.d.sync += [is_write.eq(cmd_write), left.eq(Mux(cmd_write, 9, 5)),
                             csum_due.eq(-byte)]
                with m.If(cmd_read | cmd_write):
                    fsm.next = "RECEIVE"
                with m.Else():
                    m.d.sync += status.eq(STATUS_BAD_COMMAND)
                    fsm.next = "DISCARD"
        with fsm.State("RECEIVE"):
            with m.If(framing_error):
                m.d.sync += status.eq(STATUS_FRAMING)
                fsm.next = "DISCARD"
            with m.Elif(byte_valid):
                m.d.sync += [
                    request.eq(Cat(byte, request[:-8])),
                    left.eq(left - 1),
                    csum_due.eq(csum_due - byte),
                ]
                with m.If(left == 1):
                    fsm.next = "CHECK"
            with m.Elif(timed_out):
                m.d.sync += status.eq(STATUS_TIMEOUT)
                fsm.next = "CSUM"
        with fsm.State("CHECK"):
            # the checksum byte is subtracted: a good frame leaves csum_due at 0
            with m.If(csum_due != 0):
                m.d.sync += status.eq(STATUS_BAD_CHECKSUM)
                fsm.next = "CSUM"
            with m.Elif(is_write):
                m.d.sync += [aw_pending.eq(1), w_pending.eq(1)]
                fsm.next = "WRITE"
            with m.Else():
                m.d.sync += ar_pending.eq(1)
                fsm.next = "READ_ADDR"
        with fsm.State("DISCARD"):
            with m.If(timed_out & ~urx.active):
                fsm.next = "CSUM"
        with fsm.State("READ_ADDR"):
            with m.If(axil.arready):
                m.d.sync += ar_pending.eq(0)
                fsm.next = "READ_DATA"
        with fsm.State("READ_DATA"):
            m.d.comb += axil.rready.eq(1)
            m.d.sync += rdata.eq(axil.rdata)
            with m.If(axil.rvalid):
                fsm.next = "RESP"
        with fsm.State("WRITE"):
            aw_left = aw_pending & ~axil.awready
            w_left = w_pending & ~axil.wready
            m.d.sync += [aw_pending.eq(aw_left), w_pending.eq(w_left)]
            with m.If(~aw_left & ~w_left):
                fsm.next = "WRITE_RESP"
        with fsm.State("WRITE_RESP"):
            m.d.comb += axil.bready.eq(1)
            with m.If(axil.bvalid):
                fsm.next = "RESP"
        with fsm.State("RESP"):
            # the R or B response, registered in the cycle it came: status's
            # enable is a state's flip-flop, not the interconnect's handshake
            # (docs/timing.md#board-soc)
            m.d.sync += status.eq(resp_q)
            fsm.next = "CSUM"
        with fsm.State("CSUM"):
            fsm.next = "RESPOND"
        with fsm.State("RESPOND"):
            m.d.sync += [response.eq(Cat(resp_csum, body)), resp_left.eq(RESPONSE_BYTES)]
            fsm.next = "SEND"
        with fsm.State("SEND"):
            m.d.comb += [utx.i.payload.eq(response[-8:]), utx.i.valid.eq(1)]
            with m.If(utx.i.ready):
                m.d.sync += [response.eq(response << 8), resp_left.eq(resp_left - 1)]
                with m.If(resp_left == 1):
                    fsm.next = "IDLE"
        return m
