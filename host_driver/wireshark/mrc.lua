-- MRC (Multipath Reliable Connection) over RoCEv2: a Wireshark dissector.
-- The block between the GENERATED markers comes from hw/protocol.py (the wire format's
-- one definition): `python -m host_driver.dissector` rewrites it.
-- Load it with `wireshark -X lua_script:host_driver/wireshark/mrc.lua` (or copy it
-- into Wireshark's personal plugins folder). It takes UDP port 4791.
--
-- The EV. A frame does not say its QP's EV format (docs/protocol.md, "EV formats"),
-- so the plugin reads it by this rule, first match:
--   IPv4: UDP format, EV = the UDP source port;
--   IPv6 with a nonzero flow label: STEV, EV = (flow label & 0xFFFF) << 16 | source port;
--   IPv6 whose destination address's first 32 bits are one of the SRv6 locators of the
--     preference mrc.srv6_locators: SRV6, the address a uSID carrier (locator, up to 4
--     16-bit uSIDs ended by a zero one), EV = those uSIDs, the first in bits 63..48.
--     A capture shows only the uSIDs the fabric has not consumed yet;
--   any other IPv6: UDP format, EV = the UDP source port.
-- The preference (Edit > Preferences > Protocols > MRC, or
-- `-o mrc.srv6_locators:fd00:5256::/32,0xfd00aaaa`) lists locators, comma-separated,
-- each an IPv6 prefix of the locator's length or the locator in hex; empty: no SRv6.

local mrc = Proto("mrc", "MRC over RoCEv2")

-- BEGIN GENERATED
local OPCODES = { [0x06] = "WRITE_FIRST", [0x07] = "WRITE_MIDDLE", [0x08] = "WRITE_LAST", [0x09] = "WRITE_LAST_WITH_IMMEDIATE", [0x0A] = "WRITE_ONLY", [0x0B] = "WRITE_ONLY_WITH_IMMEDIATE", [0x11] = "ACKNOWLEDGE", [0xC0] = "MRC_PROBE_REQUEST", [0xC1] = "MRC_PROBE_RESPONSE" }
local SYNDROMES = { [0x1F] = "ACK", [0x60] = "NAK_PSN_SEQUENCE_ERROR", [0x61] = "NAK_INVALID_REQUEST", [0x62] = "NAK_REMOTE_ACCESS_ERROR", [0x63] = "NAK_REMOTE_OPERATIONAL_ERROR", [0x70] = "NAK_TRIMMED" }
local WRITES = { [0x06] = true, [0x07] = true, [0x08] = true, [0x09] = true, [0x0A] = true, [0x0B] = true }
local WITH_IMM = { [0x09] = true, [0x0B] = true }
local PROBES = { [0xC0] = true, [0xC1] = true }
local ACKNOWLEDGE = 0x11
local PSN_MASK = 0xFFFFFF
local ROCE_UDP_PORT = 4791
local EV_FORMATS = { [0] = "udp", [1] = "stev", [2] = "srv6" }
local EV_UDP = 0
local EV_STEV = 1
local EV_SRV6 = 2
local EV_BITS = { [0] = 16, [1] = 32, [2] = 64 }
local SRV6_USIDS = 4
local SRV6_USID_BITS = 16
local SRV6_LOCATOR_BITS = 32
-- END GENERATED

local f = {
    ev_format = ProtoField.uint8("mrc.ev.format", "EV format (by the plugin's rule)",
                                 base.DEC, EV_FORMATS),
    ev = ProtoField.uint64("mrc.ev", "Entropy value, as the EV table holds it", base.HEX),
    srv6_locator = ProtoField.uint32("mrc.srv6.locator", "SRv6 locator", base.HEX),
    srv6_usid = ProtoField.uint16("mrc.srv6.usid",
                                  "uSID (first hop first; those consumed before the "
                                  .. "capture point are gone)", base.HEX),
    opcode = ProtoField.uint8("mrc.bth.opcode", "OpCode", base.HEX, OPCODES),
    se = ProtoField.bool("mrc.bth.se", "Solicited event", 8, nil, 0x80),
    migreq = ProtoField.bool("mrc.bth.migreq", "MigReq", 8, nil, 0x40),
    padcount = ProtoField.uint8("mrc.bth.padcount", "Pad count", base.DEC, nil, 0x30),
    tver = ProtoField.uint8("mrc.bth.tver", "Transport version", base.DEC, nil, 0x0F),
    pkey = ProtoField.uint16("mrc.bth.pkey", "Partition key", base.HEX),
    fecn = ProtoField.bool("mrc.bth.fecn", "FECN", 8, nil, 0x80),
    becn = ProtoField.bool("mrc.bth.becn", "BECN", 8, nil, 0x40),
    dqpn = ProtoField.uint24("mrc.bth.dqpn", "Destination QP", base.HEX),
    ackreq = ProtoField.bool("mrc.bth.ackreq", "AckReq", 8, nil, 0x80),
    psn = ProtoField.uint24("mrc.bth.psn", "PSN", base.DEC),
    va = ProtoField.uint64("mrc.reth.va", "Virtual address", base.HEX),
    rkey = ProtoField.uint32("mrc.reth.rkey", "R_Key", base.HEX),
    dma_len = ProtoField.uint32("mrc.reth.dma_len", "DMA length", base.DEC),
    imm = ProtoField.uint32("mrc.immdt", "Immediate data", base.HEX),
    syndrome = ProtoField.uint8("mrc.aeth.syndrome", "Syndrome", base.HEX, SYNDROMES),
    msn = ProtoField.uint24("mrc.aeth.msn", "MSN", base.DEC),
    svc_time = ProtoField.uint16("mrc.sack.svc_time",
                                 "Service time, x 64 ns (65535: that or longer)",
                                 base.DEC),
    cum_psn = ProtoField.uint24("mrc.sack.cum_psn", "Cumulative PSN", base.DEC),
    sack_base = ProtoField.uint24("mrc.sack.base", "SACK base PSN", base.DEC),
    ece = ProtoField.bool("mrc.sack.ece", "ECN echo (CE seen)", 8, nil, 0x80),
    sack_words = ProtoField.uint8("mrc.sack.words", "Bitmap words (32 bits each)", base.DEC),
    ce_count = ProtoField.uint16("mrc.sack.ce_count", "CE-marked packets", base.DEC),
    bitmap = ProtoField.bytes("mrc.sack.bitmap", "SACK bitmap (bit i: PSN base + i)"),
    sacked = ProtoField.string("mrc.sack.received", "PSNs received past the base"),
    probe_id = ProtoField.uint32("mrc.probe.id", "Probe ID", base.HEX),
    -- the NIC's probe IDs are round << 8 | EV index (docs/reliability.md, "Probes")
    probe_round = ProtoField.uint32("mrc.probe.round", "Probe round (ID >> 8)", base.DEC),
    probe_index = ProtoField.uint8("mrc.probe.ev_index", "EV index (ID & 0xff)", base.DEC),
    probe_ev = ProtoField.uint16("mrc.probe.ev", "EV probed", base.HEX),
    probe_resv = ProtoField.uint16("mrc.probe.resv", "Reserved", base.HEX),
    timestamp = ProtoField.uint64("mrc.probe.timestamp", "Timestamp (ns)", base.DEC),
    trimmed = ProtoField.bool("mrc.trimmed", "Trimmed (payload and ICRC cut by a switch)"),
    payload = ProtoField.bytes("mrc.payload", "Payload"),
    pad = ProtoField.bytes("mrc.pad", "Pad"),
    icrc = ProtoField.uint32("mrc.icrc", "ICRC", base.HEX),
}
local fields = {}
for _, v in pairs(f) do table.insert(fields, v) end
mrc.fields = fields

local e_malformed = ProtoExpert.new("mrc.malformed", "Malformed MRC frame",
                                    expert.group.MALFORMED, expert.severity.ERROR)
local e_unknown = ProtoExpert.new("mrc.unknown_opcode", "An opcode MRC does not send",
                                  expert.group.PROTOCOL, expert.severity.ERROR)
mrc.experts = { e_malformed, e_unknown }

mrc.prefs.srv6_locators = Pref.string(
    "SRv6 locators", "",
    "Comma-separated SRv6 locators (IPv6 prefixes such as fd00:5256::/32, or hex such as "
    .. "0xfd005256): an IPv6 frame with a zero flow label to an address in one carries "
    .. "its EV as uSIDs in that address. Empty: no frame is SRv6.")

local udp_srcport = Field.new("udp.srcport")
local ipv6_dst = Field.new("ipv6.dst")
local ipv6_flow = Field.new("ipv6.flow")

local LOCATOR_BYTES = SRV6_LOCATOR_BITS / 8
local USID_BYTES = SRV6_USID_BITS / 8
local PORT_BITS = EV_BITS[EV_UDP]  -- the UDP format's EV is the whole source port
local FLOW_BITS = EV_BITS[EV_STEV] - PORT_BITS  -- STEV: the flow label's bits above it

-- The innermost occurrence of a field in this frame (nil if none).
local function last(field)
    local all = { field() }
    return all[#all]
end

-- The 8 16-bit groups of an IPv6 address's text ("::" expanded), nil if malformed.
local function ipv6_groups(text)
    local function split(s)
        local out = {}
        if s == "" then return out end
        for g in (s .. ":"):gmatch("([^:]*):") do
            if not g:match("^%x%x?%x?%x?$") then return nil end
            table.insert(out, tonumber(g, 16))
        end
        return out
    end
    local gap = text:find("::", 1, true)
    local head = split(gap and text:sub(1, gap - 1) or text)
    local tail = split(gap and text:sub(gap + 2) or "")
    if not head or not tail then return nil end
    local missing = 8 - #head - #tail
    if (gap and missing < 1) or (not gap and missing ~= 0) then return nil end
    for _ = 1, missing do table.insert(head, 0) end
    for _, g in ipairs(tail) do table.insert(head, g) end
    return head
end

-- A locator of the preference: an IPv6 prefix of SRV6_LOCATOR_BITS ("fd00:5256::/32";
-- the length may be left out) or the locator in hex ("0xfd005256"); nil if neither.
local function parse_locator(text)
    if not text:find(":", 1, true) then
        local hex = text:match("^0[xX](%x+)$") or text:match("^(%x+)$")
        if not hex or #hex > SRV6_LOCATOR_BITS / 4 then return nil end
        return tonumber(hex, 16)
    end
    local addr, len = text:match("^([%x:]+)/(%d+)$")
    if not addr then addr = text end
    if len and tonumber(len) ~= SRV6_LOCATOR_BITS then return nil end
    local groups = ipv6_groups(addr)
    if not groups then return nil end
    local loc = 0
    for i = 1, SRV6_LOCATOR_BITS / 16 do loc = loc * 0x10000 + groups[i] end
    return loc
end

-- The preference's locators as a set, parsed again when the preference changes;
-- an entry that is not a locator is reported and left out.
local locators_text, locators = nil, {}
local function srv6_locators()
    local text = mrc.prefs.srv6_locators
    if text == locators_text then return locators end
    locators_text, locators = text, {}
    for entry in text:gmatch("[^,]+") do
        entry = entry:match("^%s*(.-)%s*$")
        local loc = entry ~= "" and parse_locator(entry)
        if loc then
            locators[loc] = true
        elseif entry ~= "" then
            report_failure("mrc.srv6_locators: not an SRv6 locator: " .. entry)
        end
    end
    return locators
end

local function udp_ev(t, sport)
    t:add(f.ev_format, sport.range, EV_UDP)
    t:add(f.ev, sport.range, UInt64(sport.value, 0))
    return EV_UDP
end

local function stev_ev(t, sport, flow)
    local high = bit32.band(flow.value, bit32.lshift(1, FLOW_BITS) - 1)
    t:add(f.ev_format, flow.range, EV_STEV)
    t:add(f.ev, sport.range, UInt64(bit32.bor(bit32.lshift(high, PORT_BITS), sport.value), 0))
    return EV_STEV
end

-- The uSID ranges after the locator, first hop first, up to the first zero one.
local function srv6_usids(slots)
    local out = {}
    for i = 0, SRV6_USIDS - 1 do
        local usid = slots:range(i * USID_BYTES, USID_BYTES)
        if usid:uint() == 0 then break end
        table.insert(out, usid)
    end
    return out
end

-- The EV as the NIC holds it: the uSIDs with the first in its top bits, zeros after
-- the last.
local function srv6_ev(t, dst)
    local addr = dst.range
    local slots = addr:range(LOCATOR_BYTES, SRV6_USIDS * USID_BYTES)
    local usids = srv6_usids(slots)
    local ev = UInt64(0)
    for i = 1, SRV6_USIDS do
        ev = ev:lshift(SRV6_USID_BITS):bor(UInt64(usids[i] and usids[i]:uint() or 0))
    end
    t:add(f.ev_format, addr, EV_SRV6)
    t:add(f.ev, slots, ev)
    t:add(f.srv6_locator, addr:range(0, LOCATOR_BYTES))
    for _, usid in ipairs(usids) do t:add(f.srv6_usid, usid) end
    return EV_SRV6
end

-- The EV's fields under t in the format the rule at the top of this file picks; returns
-- that format.
local function ev_fields(t, sport)
    local dst, flow = last(ipv6_dst), last(ipv6_flow)
    if not dst then return udp_ev(t, sport) end
    if flow.value ~= 0 then return stev_ev(t, sport, flow) end
    if srv6_locators()[dst.range:range(0, LOCATOR_BYTES):uint()] then
        return srv6_ev(t, dst)
    end
    return udp_ev(t, sport)
end

local function ev_tree(root, sport)
    local t = root:add(mrc, sport.range, "Entropy value")
    t:append_text(" (" .. EV_FORMATS[ev_fields(t, sport)] .. ")")
end

-- The PSNs a SACK bitmap reports received: bit i of the big-endian bitmap is
-- PSN base + i.
local function received(tvb, base_psn)
    local n = tvb:len()
    local out = {}
    for byte = 0, n - 1 do
        local v = tvb(n - 1 - byte, 1):uint()
        for bit = 0, 7 do
            if bit32.band(v, bit32.lshift(1, bit)) ~= 0 then
                table.insert(out, tostring(bit32.band(base_psn + 8 * byte + bit, PSN_MASK)))
            end
        end
    end
    if #out == 0 then return "none" end
    return table.concat(out, ", ")
end

local function short(tree, pinfo, what)
    tree:add_proto_expert_info(e_malformed, "too short for its " .. what)
    pinfo.cols.info:append(" [malformed: " .. what .. "]")
    return false
end

local function bth(tvb, tree)
    local t = tree:add(mrc, tvb(0, 12), "Base Transport Header")
    t:add(f.opcode, tvb(0, 1))
    t:add(f.se, tvb(1, 1)); t:add(f.migreq, tvb(1, 1))
    t:add(f.padcount, tvb(1, 1)); t:add(f.tver, tvb(1, 1))
    t:add(f.pkey, tvb(2, 2))
    t:add(f.fecn, tvb(4, 1)); t:add(f.becn, tvb(4, 1))
    t:add(f.dqpn, tvb(5, 3))
    t:add(f.ackreq, tvb(8, 1))
    t:add(f.psn, tvb(9, 3))
end

-- payload, pad and ICRC after the headers at off; none of them on a trimmed packet
local function tail(tvb, tree, pinfo, off, padcount)
    local rest = tvb:len() - off
    if rest == 0 then
        tree:add(f.trimmed, true)
        pinfo.cols.info:append(" [trimmed]")
        return true
    end
    if rest < 4 + padcount then return short(tree, pinfo, "ICRC") end
    local n = rest - 4 - padcount
    if n > 0 then tree:add(f.payload, tvb(off, n)) end
    if padcount > 0 then tree:add(f.pad, tvb(off + n, padcount)) end
    tree:add_le(f.icrc, tvb(tvb:len() - 4, 4))
    return true
end

function mrc.dissector(tvb, pinfo, tree)
    pinfo.cols.protocol = "MRC"
    local root = tree:add(mrc, tvb(), "MRC over RoCEv2")
    local sport = last(udp_srcport)
    if sport then ev_tree(root, sport) end
    if tvb:len() < 12 then return short(root, pinfo, "BTH") end
    bth(tvb, root)
    local op = tvb(0, 1):uint()
    local padcount = bit32.rshift(bit32.band(tvb(1, 1):uint(), 0x30), 4)
    local name = OPCODES[op]
    pinfo.cols.info = string.format("%s QP=0x%06x PSN=%d", name or "unknown opcode",
                                    tvb(5, 3):uint(), tvb(9, 3):uint())
    if WRITES[op] then
        local need = WITH_IMM[op] and 20 or 16
        if tvb:len() < 12 + need then return short(root, pinfo, "RETH") end
        local r = root:add(mrc, tvb(12, 16), "RDMA Extended Transport Header")
        r:add(f.va, tvb(12, 8)); r:add(f.rkey, tvb(20, 4)); r:add(f.dma_len, tvb(24, 4))
        if WITH_IMM[op] then root:add(f.imm, tvb(28, 4)) end
        return tail(tvb, root, pinfo, 12 + need, padcount)
    elseif op == ACKNOWLEDGE then
        if tvb:len() < 12 + 4 + 12 then return short(root, pinfo, "AETH and SACK") end
        local a = root:add(mrc, tvb(12, 4), "ACK Extended Transport Header")
        a:add(f.syndrome, tvb(12, 1)); a:add(f.msn, tvb(13, 3))
        local words = tvb(25, 1):uint()
        if tvb:len() < 28 + 4 * words + 4 then return short(root, pinfo, "SACK bitmap") end
        local s = root:add(mrc, tvb(16, 12 + 4 * words), "MRC SACK extension")
        -- the service time's high byte is the extension's byte 0, its low byte byte 4
        s:add(f.svc_time, tvb(16, 5), tvb(16, 1):uint() * 256 + tvb(20, 1):uint())
        s:add(f.cum_psn, tvb(17, 3)); s:add(f.sack_base, tvb(21, 3))
        s:add(f.ece, tvb(24, 1)); s:add(f.sack_words, tvb(25, 1)); s:add(f.ce_count, tvb(26, 2))
        if words > 0 then
            s:add(f.bitmap, tvb(28, 4 * words))
            s:add(f.sacked, received(tvb(28, 4 * words), tvb(21, 3):uint()))
        end
        pinfo.cols.info:append(" " .. (SYNDROMES[tvb(12, 1):uint()] or "syndrome?") ..
                               " cum=" .. tvb(17, 3):uint())
        return tail(tvb, root, pinfo, 28 + 4 * words, padcount)
    elseif PROBES[op] then
        if tvb:len() < 12 + 16 then return short(root, pinfo, "probe") end
        local p = root:add(mrc, tvb(12, 16), "MRC probe")
        p:add(f.probe_id, tvb(12, 4))
        p:add(f.probe_round, tvb(12, 3), tvb(12, 3):uint())
        p:add(f.probe_index, tvb(15, 1))
        p:add(f.probe_ev, tvb(16, 2)); p:add(f.probe_resv, tvb(18, 2))
        p:add(f.timestamp, tvb(20, 8))
        return tail(tvb, root, pinfo, 28, padcount)
    end
    root:add_proto_expert_info(e_unknown, string.format("opcode 0x%02x", op))
    return false
end

DissectorTable.get("udp.port"):add(ROCE_UDP_PORT, mrc)
