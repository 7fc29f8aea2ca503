package boltstore_test

const crashChildEnv = "BOLTSTORE_CRASH_CHILD"

func crashChild() {}
