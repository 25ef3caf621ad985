#pragma once
#include <x86intrin.h>
#include <cstdio>
#define TSC_NOW() __rdtsc()
#define TSC_MS(a, b) (((b) - (a)) / 2.6e6)
