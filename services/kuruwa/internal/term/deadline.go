package term

import "time"

// drainGrace is how long output still buffered in the PTY may take to arrive after the program
// exited before its output is declared complete (background children can hold the PTY open).
const drainGrace = 200 * time.Millisecond
