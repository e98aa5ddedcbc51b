package binary

// HeaderLen is the length of every frame header.
const HeaderLen = 24

// Magic bytes (header byte 0).
const (
	MagicRequest     = 0x80 // request, key length u16 in bytes 2-3
	MagicResponse    = 0x81 // response, key length u16 in bytes 2-3
	MagicAltRequest  = 0x08 // "alternative request": byte 2 = framing-extras length, byte 3 = key length (u8)
	MagicAltResponse = 0x18 // same layout for responses
)

// DatatypeJSON is the datatype bit that marks a value as JSON.
const DatatypeJSON = 0x01

// MaxKeyLen is the longest key memcached (and so kvd) accepts.
const MaxKeyLen = 250

// Feature is a HELLO feature code: HELLO's value is a list of them (u16
// each, big-endian) and its reply the subset the server supports.
type Feature uint16

// HELLO features kvd supports (SPEC section 3).
const (
	FeatureXError       Feature = 0x07 // error bodies are {"error":{"context":"…"}}
	FeatureSelectBucket Feature = 0x08 // SELECT_BUCKET
	FeatureJSON         Feature = 0x0b // values may carry datatype JSON
	FeatureAltRequest   Feature = 0x10 // AltRequestSupport: magic 0x08 requests, 0x18 replies
	FeatureReportUnits  Feature = 0x1a // ReportUnitUsage: RU/WU/throttle frame infos in 0x18 replies
	FeatureNonBlocking  Feature = 0x1b // NonBlockingThrottlingMode: 0x0c at once instead of parking
)

// Opcode is the command byte of a frame (header byte 1).
type Opcode uint8

// Opcodes kvd serves: memcached's binary protocol plus the Couchbase
// extensions kvd implements. String gives their wire names.
const (
	OpGet               Opcode = 0x00
	OpSet               Opcode = 0x01
	OpAdd               Opcode = 0x02
	OpReplace           Opcode = 0x03
	OpDelete            Opcode = 0x04
	OpIncrement         Opcode = 0x05
	OpDecrement         Opcode = 0x06
	OpQuit              Opcode = 0x07
	OpFlush             Opcode = 0x08
	OpGetQ              Opcode = 0x09
	OpNoop              Opcode = 0x0a
	OpVersion           Opcode = 0x0b
	OpGetK              Opcode = 0x0c
	OpGetKQ             Opcode = 0x0d
	OpAppend            Opcode = 0x0e
	OpPrepend           Opcode = 0x0f
	OpStat              Opcode = 0x10
	OpSetQ              Opcode = 0x11
	OpAddQ              Opcode = 0x12
	OpReplaceQ          Opcode = 0x13
	OpDeleteQ           Opcode = 0x14
	OpIncrementQ        Opcode = 0x15
	OpDecrementQ        Opcode = 0x16
	OpQuitQ             Opcode = 0x17
	OpFlushQ            Opcode = 0x18
	OpAppendQ           Opcode = 0x19
	OpPrependQ          Opcode = 0x1a
	OpVerbosity         Opcode = 0x1b
	OpTouch             Opcode = 0x1c
	OpGAT               Opcode = 0x1d
	OpGATQ              Opcode = 0x1e
	OpHello             Opcode = 0x1f
	OpSASLListMechs     Opcode = 0x20
	OpSASLAuth          Opcode = 0x21
	OpGATK              Opcode = 0x23 // GAT that echoes the key, like GETK
	OpGATKQ             Opcode = 0x24
	OpSetBucketThrottle Opcode = 0x2a // SetBucketThrottleProperties
	OpSetNodeThrottle   Opcode = 0x2c // SetNodeThrottleProperties
	OpCreateBucket      Opcode = 0x85
	OpDeleteBucket      Opcode = 0x86
	OpListBuckets       Opcode = 0x87
	OpSelectBucket      Opcode = 0x89
)

// opInfo is everything the package knows about one opcode.
type opInfo struct {
	name  string // String(); "0x5f" for unknown opcodes
	known bool
	quiet bool
	loud  Opcode // the non-quiet twin; the opcode itself when not quiet
	shape shape  // CheckShape rules; zero for unknown opcodes
}

// opDef is one row of the opcode definition table below.
type opDef struct {
	op    Opcode
	name  string
	loud  Opcode // == op unless quiet
	shape shape
}

// opDefs lists every known opcode with its shape (see shape.go for the rule
// vocabulary). Quiet variants share the shape of their loud twin.
var opDefs = [...]opDef{
	{OpGet, "GET", OpGet, getShape},
	{OpSet, "SET", OpSet, storeShape},
	{OpAdd, "ADD", OpAdd, storeShape},
	{OpReplace, "REPLACE", OpReplace, storeShape},
	{OpDelete, "DELETE", OpDelete, deleteShape},
	{OpIncrement, "INCR", OpIncrement, arithShape},
	{OpDecrement, "DECR", OpDecrement, arithShape},
	{OpQuit, "QUIT", OpQuit, emptyShape},
	{OpFlush, "FLUSH", OpFlush, flushShape},
	{OpGetQ, "GETQ", OpGet, getShape},
	{OpNoop, "NOOP", OpNoop, emptyShape},
	{OpVersion, "VERSION", OpVersion, emptyShape},
	{OpGetK, "GETK", OpGetK, getShape},
	{OpGetKQ, "GETKQ", OpGetK, getShape},
	{OpAppend, "APPEND", OpAppend, concatShape},
	{OpPrepend, "PREPEND", OpPrepend, concatShape},
	{OpStat, "STAT", OpStat, statShape},
	{OpSetQ, "SETQ", OpSet, storeShape},
	{OpAddQ, "ADDQ", OpAdd, storeShape},
	{OpReplaceQ, "REPLACEQ", OpReplace, storeShape},
	{OpDeleteQ, "DELETEQ", OpDelete, deleteShape},
	{OpIncrementQ, "INCRQ", OpIncrement, arithShape},
	{OpDecrementQ, "DECRQ", OpDecrement, arithShape},
	{OpQuitQ, "QUITQ", OpQuit, emptyShape},
	{OpFlushQ, "FLUSHQ", OpFlush, flushShape},
	{OpAppendQ, "APPENDQ", OpAppend, concatShape},
	{OpPrependQ, "PREPENDQ", OpPrepend, concatShape},
	{OpVerbosity, "VERBOSITY", OpVerbosity, verbosityShape},
	{OpTouch, "TOUCH", OpTouch, touchShape},
	{OpGAT, "GAT", OpGAT, touchShape},
	{OpGATQ, "GATQ", OpGAT, touchShape},
	{OpHello, "HELLO", OpHello, helloShape},
	{OpSASLListMechs, "SASL_LIST_MECHS", OpSASLListMechs, emptyShape},
	{OpSASLAuth, "SASL_AUTH", OpSASLAuth, saslAuthShape},
	{OpGATK, "GATK", OpGATK, touchShape},
	{OpGATKQ, "GATKQ", OpGATK, touchShape},
	{OpSetBucketThrottle, "SET_BUCKET_THROTTLE_PROPERTIES", OpSetBucketThrottle, keyedAdminShape},
	{OpSetNodeThrottle, "SET_NODE_THROTTLE_PROPERTIES", OpSetNodeThrottle, unkeyedAdminShape},
	{OpCreateBucket, "CREATE_BUCKET", OpCreateBucket, keyedAdminShape},
	{OpDeleteBucket, "DELETE_BUCKET", OpDeleteBucket, keyedAdminShape},
	{OpListBuckets, "LIST_BUCKETS", OpListBuckets, emptyShape},
	{OpSelectBucket, "SELECT_BUCKET", OpSelectBucket, selectShape},
}

// opTable is opDefs indexed by opcode, with hex names for the unknown ones,
// so that no Opcode method ever allocates.
var opTable = buildOpTable()

func buildOpTable() (t [256]opInfo) {
	const hexDigits = "0123456789abcdef"
	for i := range t {
		t[i] = opInfo{
			name: "0x" + string(hexDigits[i>>4]) + string(hexDigits[i&0xf]),
			loud: Opcode(i),
		}
	}
	for _, d := range opDefs {
		t[d.op] = opInfo{name: d.name, known: true, quiet: d.loud != d.op, loud: d.loud, shape: d.shape}
	}
	return t
}

// String returns the command name ("GET", "SETQ", "SELECT_BUCKET"), or the
// opcode in hex ("0x5f") when it is unknown. It never allocates.
func (o Opcode) String() string { return opTable[o].name }

// Known reports whether o is one of the opcodes kvd serves. The server
// answers any other opcode with StatusUnknownCommand.
func (o Opcode) Known() bool { return opTable[o].known }

// IsQuiet reports whether o is a quiet variant (GETQ, GETKQ, SETQ, ADDQ,
// REPLACEQ, DELETEQ, INCRQ, DECRQ, QUITQ, FLUSHQ, APPENDQ, PREPENDQ, GATQ,
// GATKQ), which sends no response on success (and, for GETQ, GETKQ, GATQ and
// GATKQ, none on a miss either).
func (o Opcode) IsQuiet() bool { return opTable[o].quiet }

// NonQuiet returns the loud twin of a quiet opcode (GETQ→GET, GETKQ→GETK,
// GATQ→GAT, GATKQ→GATK, …) and o itself otherwise.
func (o Opcode) NonQuiet() Opcode { return opTable[o].loud }

// Status is the status field of a response (header bytes 6-7).
type Status uint16

// Statuses kvd sends.
const (
	StatusOK               Status = 0x00
	StatusKeyNotFound      Status = 0x01
	StatusKeyExists        Status = 0x02
	StatusTooBig           Status = 0x03
	StatusInvalidArguments Status = 0x04
	StatusNotStored        Status = 0x05
	StatusNonNumeric       Status = 0x06
	StatusNoBucket         Status = 0x08
	StatusWouldThrottle    Status = 0x0c
	StatusAuthError        Status = 0x20
	StatusAccessDenied     Status = 0x24
	StatusUnknownFrameInfo Status = 0x80
	StatusUnknownCommand   Status = 0x81
	StatusOutOfMemory      Status = 0x82
	StatusNotSupported     Status = 0x83
	StatusInternal         Status = 0x84
	StatusBusy             Status = 0x85
	StatusTemporaryFailure Status = 0x86
)

// statusNames are the descriptions Status.String returns.
var statusNames = map[Status]string{
	StatusOK:               "Success",
	StatusKeyNotFound:      "Not found",
	StatusKeyExists:        "Key exists",
	StatusTooBig:           "Too large",
	StatusInvalidArguments: "Invalid arguments",
	StatusNotStored:        "Not stored",
	StatusNonNumeric:       "Non-numeric value",
	StatusNoBucket:         "No bucket selected",
	StatusWouldThrottle:    "Would throttle",
	StatusAuthError:        "Authentication failed",
	StatusAccessDenied:     "Access denied",
	StatusUnknownFrameInfo: "Unknown frame info",
	StatusUnknownCommand:   "Unknown command",
	StatusOutOfMemory:      "Out of memory",
	StatusNotSupported:     "Not supported",
	StatusInternal:         "Internal error",
	StatusBusy:             "Busy",
	StatusTemporaryFailure: "Temporary failure",
}

// String returns a short human-readable description ("Not found",
// "Would throttle"), or "status 0x1234" for a status this package does not
// name (which allocates). These are not memcached's reply bodies, which vary
// ("Data exists for key.", "Not stored."); see testdata/memcached-1.6.18.txt.
func (s Status) String() string {
	if name, ok := statusNames[s]; ok {
		return name
	}
	const hexDigits = "0123456789abcdef"
	return "status 0x" + string([]byte{
		hexDigits[s>>12], hexDigits[s>>8&0xf], hexDigits[s>>4&0xf], hexDigits[s&0xf],
	})
}
