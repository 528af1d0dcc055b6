#pragma once
#include <wslay/wslay.h>
