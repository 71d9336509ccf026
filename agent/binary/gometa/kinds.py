"""Go's kinds of types (reflect.Kind, internal/abi.Kind), as a type descriptor's kind
byte holds them."""

BOOL, INT, INT8, INT16, INT32, INT64 = 1, 2, 3, 4, 5, 6
UINT, UINT8, UINT16, UINT32, UINT64, UINTPTR = 7, 8, 9, 10, 11, 12
FLOAT32, FLOAT64, COMPLEX64, COMPLEX128 = 13, 14, 15, 16
ARRAY, CHAN, FUNC, INTERFACE, MAP, POINTER, SLICE, STRING, STRUCT, UNSAFE_POINTER = range(17, 27)
