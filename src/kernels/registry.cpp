// Placeholder translation unit; the kernels helper replaces this file.
#include "kernels/registry.h"
