#define KJ_RELATIVE 2
