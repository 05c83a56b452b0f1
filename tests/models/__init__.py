"""Reference models that several tests share: the devices and peers a block
talks to (a UART, the UART bridge, an MDIO PHY), written once here and never
imported from a test file."""
