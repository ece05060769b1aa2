#ifndef CCALLGRIND_H
#define CCALLGRIND_H

/// Switches callgrind's collection on or off (valgrind's client request; a
/// few instructions that do nothing outside valgrind). `instructions.sh` runs
/// with `--collect-atstart=no`, so only what runs between two toggles counts.
void ccallgrind_toggle_collect(void);

#endif
