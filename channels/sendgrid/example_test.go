package sendgrid_test

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/pacerhq/pacer/channels"
	"github.com/pacerhq/pacer/channels/sendgrid"
	"github.com/pacerhq/pacer/channels/sendgrid/sendgridtest"
)

// Send one templated mail through the fake, as API key "marketing" on
// behalf of a subuser.
func ExampleClient_Send() {
	keys := map[string]string{"marketing": "SG.example-secret"}
	fake := sendgridtest.NewServer(sendgridtest.Config{APIKeys: keys})
	defer fake.Close()

	c, err := sendgrid.New(sendgrid.Config{
		BaseURL:    fake.URL(), // sendgrid.DefaultBaseURL or sendgrid.EUBaseURL in production
		APIKeys:    keys,
		OnBehalfOf: map[string]string{"marketing": "newsletter-subuser"},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	res, err := c.Send(context.Background(), channels.Message{
		ID:  "env-42",
		Key: "marketing",
		To:  "ada@example.com",
		Payload: json.RawMessage(`{"from":{"email":"news@example.org"},"template_id":"d-1234",
			"personalization":{"dynamic_template_data":{"name":"Ada"}}}`),
	})
	fmt.Println(len(res.ProviderID), err)
	a := fake.Arrivals()[0]
	fmt.Println(a.Key, a.OnBehalfOf, a.ID)
	// Output:
	// 22 <nil>
	// marketing newsletter-subuser env-42
}
