"""Static analysis: libcst rules that point at the line, without importing torch."""
