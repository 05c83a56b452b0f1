"""Board-side gateware: the RGMII Ethernet MAC, the UART-to-AXI4-Lite bridge
and (once NicCore exists) the dev-board tops."""
